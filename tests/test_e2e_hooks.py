"""End to end through `agentd run`: the webhook listener verifies each delivery's HMAC, starts
nothing new for a replayed delivery, refuses oversized and invalid bodies, answers 202 with a
committed instance id, signals waiting instances, and starts a prompt turn."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.test_e2e_automations import FLOWS

SECRET = "hook-secret-0123456789"
CONFIG = f"""
[automations]
folder = "{FLOWS}"

[hooks]
enabled = true
listen = "127.0.0.1:0"
max_body_bytes = 2048

[hooks.routes.ci]
workflow = "chain"
secret_env = "CI_HOOK_SECRET"

[hooks.routes.greeter]
workflow = "greet"
secret_env = "CI_HOOK_SECRET"

[hooks.routes.notes]
prompt = "A note arrived from the notes service:"
secret_env = "CI_HOOK_SECRET"

[hooks.routes.unset]
workflow = "chain"
secret_env = "NOT_SET_ANYWHERE"
"""


class Hooks:
    def __init__(self, daemon: Daemon, tg: FakeTelegram, base: str) -> None:
        self.daemon, self.tg, self.base = daemon, tg, base

    def post(
        self,
        path: str,
        body: bytes | dict[str, Any],
        *,
        secret: str = SECRET,
        header: str = "X-Hub-Signature-256",
        **headers: str,
    ) -> tuple[int, dict[str, Any]]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sig = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
        request = urllib.request.Request(
            self.base + path,
            data=raw,
            method="POST",
            headers={"Content-Type": "application/json", header: sig, **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def instances(self) -> int:
        return self.daemon.query("SELECT COUNT(*) FROM workflow_instances")[0][0]

    def wait(self, iid: str) -> dict[str, Any]:
        done = self.daemon.cli("workflows", "wait", iid, "--timeout", "60")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)


@pytest.fixture(scope="module")
def hooks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hooks]:
    tmp = tmp_path_factory.mktemp("hooks")
    (tmp / "agentd.toml").write_text(CONFIG)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            CI_HOOK_SECRET=SECRET,
        )
        with running_daemon(tmp, env) as daemon:
            line = next(x for x in daemon.log().splitlines() if "hooks listening" in x)
            where = re.search(r"127\.0\.0\.1:\d+", line)
            assert where, line
            yield Hooks(daemon, tg, f"http://{where[0]}")


def test_a_signed_delivery_starts_once_and_a_replay_starts_nothing(hooks: Hooks) -> None:
    headers = {"X-GitHub-Delivery": "d-1001"}
    status, body = hooks.post("/hooks/ci", {"tag": "hook1"}, **headers)
    assert status == 202 and body["created"] is True, body
    # 202 came after the commit: the instance is in the database already.
    assert hooks.daemon.query(
        "SELECT 1 FROM workflow_instances WHERE id = ?", (body["instance_id"],)
    )
    again, replay = hooks.post("/hooks/ci", {"tag": "hook1"}, **headers)
    assert again == 200 and replay == {"instance_id": body["instance_id"], "created": False}
    assert hooks.wait(body["instance_id"])["output"] == {"steps": [1, 2, 3]}
    assert hooks.daemon.effects().count("hook1 step1") == 1
    source = hooks.daemon.query(
        "SELECT source FROM automation_runs WHERE instance_id = ?", (body["instance_id"],)
    )[0][0]
    assert source == "hook:ci"


def test_the_generic_signature_header_and_idempotency_key_work(hooks: Hooks) -> None:
    status, body = hooks.post(
        "/hooks/ci", {"tag": "generic"}, header="X-Signature-256", **{"Idempotency-Key": "k-1"}
    )
    assert status == 202, body
    assert hooks.wait(body["instance_id"])["status"] == "complete"


def _bad_signature_notices(hooks: Hooks) -> int:
    found = hooks.daemon.query(
        "SELECT COUNT(*) FROM workflow_instances WHERE id LIKE 'hook-bad-signature-%'"
    )
    return int(found[0][0])


def test_bad_signatures_and_bad_bodies_start_nothing(hooks: Hooks) -> None:
    before, told_before = hooks.instances(), _bad_signature_notices(hooks)
    assert hooks.post("/hooks/ci", {"tag": "x"}, secret="wrong-secret-000")[0] == 401
    tampered = json.dumps({"tag": "x"}).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), tampered, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        hooks.base + "/hooks/ci",
        data=tampered + b" ",
        method="POST",
        headers={"X-Hub-Signature-256": sig},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 401
    unsigned = urllib.request.Request(hooks.base + "/hooks/ci", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(unsigned, timeout=30)
    assert caught.value.code == 401
    status, body = hooks.post("/hooks/ci", {"tag": "x" * 5000})
    assert status == 413, body
    assert hooks.post("/hooks/ci", b"{not json")[0] == 400
    assert hooks.post("/hooks/ci", b"[1, 2]")[0] == 400
    status, body = hooks.post("/hooks/ci", {"gap": 1})
    assert status == 422 and "tag: Field required" in body["error"]
    assert hooks.post("/hooks/nope", {"tag": "x"})[0] == 404
    assert hooks.post("/hooks/unset", {"tag": "x"})[0] == 503
    # A later good delivery proves the listener is still up, and only it started anything
    # beside the owner's one notice of the bad signatures.
    status, body = hooks.post("/hooks/ci", {"tag": "after-bad"})
    assert status == 202
    told = _bad_signature_notices(hooks)
    assert told == 1  # once a day, however many bad requests
    assert hooks.instances() == before + 1 + (told - told_before)
    assert SECRET not in hooks.daemon.log()


def test_an_event_by_hook_wakes_the_waiting_instance(hooks: Hooks) -> None:
    status, body = hooks.post("/hooks/greeter", {"name": "Hook"})
    assert status == 202
    iid = body["instance_id"]
    deadline = time.monotonic() + 30
    while (
        hooks.daemon.query("SELECT status FROM workflow_instances WHERE id = ?", (iid,))[0][0]
        != "waiting"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    wrong = hooks.post("/hooks/ci/events/go", {"instance_id": iid, "data": {}})
    assert wrong[0] == 404  # another hook's workflow: not its instance to signal
    status, sent = hooks.post(
        "/hooks/greeter/events/go",
        {"instance_id": iid, "data": {"say": "from the hook"}},
        **{"X-Delivery-Id": "ev-1"},
    )
    assert status == 202 and sent["delivered"] is True
    assert hooks.wait(iid)["output"]["said"] == "from the hook"
    replay = hooks.post(
        "/hooks/greeter/events/go", {"instance_id": iid, "data": {}}, **{"X-Delivery-Id": "ev-1"}
    )
    assert replay[0] == 409  # finished: it takes no more events


def test_a_prompt_hook_starts_a_turn_in_the_owners_chat(hooks: Hooks) -> None:
    status, body = hooks.post("/hooks/notes", {"note": "buy milk"}, **{"X-Delivery-Id": "n-1"})
    assert status == 202, body
    turn = hooks.wait(body["instance_id"])
    assert turn["status"] == "complete"
    row = hooks.daemon.query(
        "SELECT workflow, input FROM workflow_instances WHERE id = ?", (body["instance_id"],)
    )[0]
    assert row[0] == "turn"
    text = json.loads(row[1])["text"]
    assert "A note arrived" in text and "buy milk" in text and "untrusted" in text
    # The body is the sender's words: the turn is tainted from its first model call.
    assert json.loads(row[1])["outside_source"] == "a webhook delivery (notes)"
    assert hooks.post("/hooks/notes", {"note": "buy milk"}, **{"X-Delivery-Id": "n-1"})[0] == 200
