"""The automations in examples/automations, run as an owner would: through `agentd run`, the
CI one by a signed GitHub-style webhook against a local fake of GitHub's re-run endpoint, the
page watcher against a local page that changes once (one model call, for that change only)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import OWNER, REPO_ROOT, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import Reply, tool_use_block

EXAMPLES = REPO_ROOT / "examples" / "automations"
SECRET = "gh-hook-secret-42"


class Local:
    """GitHub's re-run endpoint and a watched page, recording what they were asked."""

    def __init__(self) -> None:
        self.page = "<html><body><p>Parcel: in transit</p></body></html>"
        self.reruns: list[dict[str, Any]] = []
        self.page_hits = 0
        local = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                local.page_hits += 1
                body = local.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                local.reruns.append({"path": self.path, "auth": self.headers["Authorization"]})
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Daemon, FakeTelegram, FakeAnthropic, Local]]:
    tmp = tmp_path_factory.mktemp("examples")
    (tmp / "agentd.toml").write_text(
        f'[automations]\nfolder = "{EXAMPLES}"\n\n[automations.hooks]\nenabled = true\n'
        'listen = "127.0.0.1:0"\n\n[automations.hooks.routes.github]\nworkflow = "ci_failure"\n'
        'secret_env = "GITHUB_HOOK_SECRET"\n'
    )
    local = Local()
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            GITHUB_HOOK_SECRET=SECRET,
            GITHUB_API_URL=local.url,
            GITHUB_TOKEN="ghp_test_token_123",
        )
        with running_daemon(tmp, env) as daemon:
            yield daemon, tg, llm, local
    local.server.shutdown()


def deliver(daemon: Daemon, payload: dict[str, Any], delivery: str) -> dict[str, Any]:
    line = next(x for x in daemon.log().splitlines() if "hooks listening" in x)
    where = re.search(r"127\.0\.0\.1:\d+", line)
    assert where
    raw = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"http://{where[0]}/hooks/github",
        data=raw,
        method="POST",
        headers={
            "X-Hub-Signature-256": sig,
            "X-GitHub-Delivery": delivery,
            "X-GitHub-Event": "workflow_run",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 202
        return dict(json.loads(response.read()))


def run_event(conclusion: str, run_id: int) -> dict[str, Any]:
    return {
        "action": "completed",
        "workflow_run": {
            "id": run_id,
            "name": "tests",
            "conclusion": conclusion,
            "head_branch": "main",
            "html_url": f"https://github.test/run/{run_id}",
        },
        "repository": {"full_name": "owner/repo"},
        "sender": {"login": "someone"},  # extra fields in GitHub's payload are ignored
    }


def wait_output(daemon: Daemon, iid: str) -> dict[str, Any]:
    done = daemon.cli("workflows", "wait", iid, "--timeout", "90")
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout)["output"])


def test_ci_failure_asks_the_owner_and_reruns(world: tuple[Any, ...]) -> None:
    daemon, tg, _, local = world
    ok = deliver(daemon, run_event("success", 7), "gh-ok")
    assert wait_output(daemon, ok["instance_id"]) == {"action": "ignored"}
    failed = deliver(daemon, run_event("failure", 99), "gh-fail")
    question = tg.wait_until(
        lambda: next((m for m in tg.sent if "failed on owner/repo" in m["plain_text"]), None),
        30,
        "the question",
    )
    assert not local.reruns  # nothing re-run before the owner says so
    rerun = question["reply_markup"]["inline_keyboard"][0][0]
    assert rerun["text"] == "Re-run"
    tg.add_callback_query(OWNER, OWNER, question["message_id"], rerun["callback_data"])
    assert wait_output(daemon, failed["instance_id"]) == {"action": "rerun"}
    assert local.reruns == [
        {"path": "/repos/owner/repo/actions/runs/99/rerun", "auth": "Bearer ghp_test_token_123"}
    ]
    assert any("Re-running tests" in m["plain_text"] for m in tg.sent)
    assert sum("failed on owner/repo" in m["plain_text"] for m in tg.sent) == 1
    assert "ghp_test_token_123" not in daemon.log()


def test_page_watch_calls_the_model_only_when_the_page_changed(world: tuple[Any, ...]) -> None:
    daemon, tg, llm, local = world
    compared: list[str] = []

    def responder(body: dict[str, Any]) -> Any:
        if "The owner watches" not in str(body["messages"][0]):
            return None
        compared.append(str(body["messages"][0]))
        return Reply(content=[tool_use_block("answer", {"summary": "It was delivered."})])

    llm.set_responder(responder)
    started = daemon.cli_json(
        "workflows",
        "start",
        "page_watch",
        "--input",
        json.dumps(
            {"url": local.url + "/parcel", "what": "the parcel", "every_minutes": 0.01, "rounds": 4}
        ),
    )
    iid = started["instance_id"]

    def step_done(name: str) -> bool:
        rows = daemon.query(
            "SELECT status FROM workflow_steps WHERE instance_id = ? AND name = ?", (iid, name)
        )
        return bool(rows) and rows[0][0] == "complete"

    deadline = time.monotonic() + 60
    while not step_done("fetch#2"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert compared == []  # two checks, same page: no model call
    local.page = "<html><body><p>Parcel: delivered</p><script>x()</script></body></html>"
    output = wait_output(daemon, iid)
    assert output["checks"] == 4 and output["changes"] == 1
    assert len(compared) == 1 and "in transit" in compared[0] and "delivered" in compared[0]
    notes = [m["plain_text"] for m in tg.sent if "the parcel changed" in m["plain_text"]]
    assert notes == [f"🔔 the parcel changed: It was delivered.\n{local.url}/parcel"]
    # It continues as a new instance that carries the last page, so it does not re-notify.
    nxt = output["next_instance"]
    assert daemon.query("SELECT workflow FROM workflow_instances WHERE id = ?", (nxt,))
    deadline = time.monotonic() + 60
    while local.page_hits < 6:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    daemon.cli("workflows", "cancel", nxt)
    assert len(compared) == 1
    usage = daemon.query("SELECT COUNT(*) FROM llm_usage WHERE instance_id = ?", (iid,))[0][0]
    assert usage == 1
    assert Path(EXAMPLES / "page_watch.py").exists()
