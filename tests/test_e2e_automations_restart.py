"""End to end through `agentd run`, with kill -9 and restarts: each step's effect happens once
when the daemon dies between any two steps; ask_owner survives a restart, and its timeout
passes across one; an instance finishes on the version it started with while that code is
loaded, stops with a divergence error naming the step when it is not, and `workflows retry
--from STEP` re-runs it on the new code."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import OWNER, Daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.test_e2e_automations import automation_env


@pytest.fixture
def fakes() -> Iterator[tuple[FakeTelegram, FakeAnthropic]]:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        yield tg, llm


def wait_for(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def step_done(daemon: Daemon, iid: str, name: str) -> bool:
    rows = daemon.query(
        "SELECT status FROM workflow_steps WHERE instance_id = ? AND name = ?", (iid, name)
    )
    return bool(rows) and rows[0][0] == "complete"


def status(daemon: Daemon, iid: str) -> str:
    return daemon.query("SELECT status FROM workflow_instances WHERE id = ?", (iid,))[0][0]


def start(daemon: Daemon, name: str, inp: dict[str, Any]) -> str:
    started = daemon.cli_json("workflows", "start", name, "--input", json.dumps(inp))
    return str(started["instance_id"])


def wait_done(daemon: Daemon, iid: str) -> tuple[int, dict[str, Any]]:
    done = daemon.cli("workflows", "wait", iid, "--timeout", "90")
    return done.returncode, json.loads(done.stdout or "{}")


def test_kill_9_between_every_pair_of_steps_runs_each_effect_once(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    daemon = Daemon(tmp_path, automation_env(tmp_path, *fakes)).start()
    try:
        iid = start(daemon, "chain", {"tag": "k9", "gap": 1.0})
        for n in (1, 2):
            wait_for(f"step{n}", lambda n=n: step_done(daemon, iid, f"step{n}"))
            daemon.kill9()  # after step n's commit, before step n+1 began (a durable gap)
            assert not step_done(daemon, iid, f"step{n + 1}")
            daemon.start()
        code, result = wait_done(daemon, iid)
        assert code == 0 and result["output"] == {"steps": [1, 2, 3]}, result
        assert [e for e in daemon.effects() if e.startswith("k9 ")] == [
            "k9 step1",
            "k9 step2",
            "k9 step3",
        ]
    finally:
        daemon.stop()


def test_ask_owner_survives_a_restart_and_times_out_across_one(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, _ = fakes
    daemon = Daemon(tmp_path, automation_env(tmp_path, *fakes)).start()
    try:
        answered = start(daemon, "ask", {"question": "Restart-proof?"})
        expiring = start(daemon, "ask", {"question": "Nobody answers?", "timeout": 4})

        def question(text: str) -> dict[str, Any] | None:
            return next((m for m in tg.sent if text in m["plain_text"]), None)

        asked = wait_for("the question", lambda: question("Restart-proof?"))
        wait_for("the second question", lambda: question("Nobody answers?"))
        daemon.kill9()
        daemon.start()
        data = asked["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        tg.add_callback_query(OWNER, OWNER, asked["message_id"], data)
        assert wait_done(daemon, answered) == (
            0,
            {
                "id": answered,
                "status": "complete",
                "error": None,
                "output": {"choice": "Yes"},
            },
        )
        code, result = wait_done(daemon, expiring)
        assert code == 0 and result["output"] == {"choice": "No"}  # the default, at the timeout
        assert [m["plain_text"] for m in tg.sent].count(asked["plain_text"]) == 1  # asked once
        timed_out = daemon.query(
            "SELECT status, answered_by FROM automation_questions WHERE instance_id = ?",
            (expiring,),
        )
        assert tuple(timed_out[0]) == ("timed_out", "timeout")
        assert any("no answer in time, so: No" in e["plain_text"] for e in tg.edits)
    finally:
        daemon.stop()


V1 = """
from pydantic import BaseModel
from agentd.automations import AutoStep, workflow
from tests.automations.flows import touch

class In(BaseModel):
    tag: str

class Out(BaseModel):
    code: str

@workflow("deploy", input=In, output=Out, version={version})
async def deploy(step: AutoStep, inp: In) -> Out:
    await step.do("{first}", touch, f"v{version} {{inp.tag}} {first}", 1)
    await step.wait_for_event("go", timeout=300)
    await step.do("ship", touch, f"v{version} {{inp.tag}} ship", 2)
    return Out(code="v{version}")
"""


def test_versions_finish_on_their_code_or_stop_naming_the_step(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "deploy_v1.py").write_text(V1.format(version=1, first="build"))
    daemon = Daemon(tmp_path, automation_env(tmp_path, *fakes, folder=folder)).start()
    try:
        kept, stale = start(daemon, "deploy", {"tag": "a"}), start(daemon, "deploy", {"tag": "b"})
        for iid in (kept, stale):
            wait_for("waiting", lambda iid=iid: status(daemon, iid) == "waiting")
        daemon.stop()
        # v2 renames the first step; v1 stays loaded beside it: v1's instances finish on v1.
        (folder / "deploy_v2.py").write_text(V1.format(version=2, first="compile"))
        daemon.start()
        fresh = start(daemon, "deploy", {"tag": "c"})
        for iid in (kept, fresh):
            wait_for("waiting", lambda iid=iid: status(daemon, iid) == "waiting")
            daemon.cli_json("workflows", "signal", iid, "go")
        assert wait_done(daemon, kept)[1]["output"] == {"code": "v1"}
        assert wait_done(daemon, fresh)[1]["output"] == {"code": "v2"}
        daemon.stop()
        # v1's code is gone: its last instance, resumed at start, stops naming the step that
        # no longer matches.
        (folder / "deploy_v1.py").unlink()
        daemon.start()
        code, result = wait_done(daemon, stale)
        assert code == 1 and result["status"] == "errored"
        assert "DivergenceError" in result["error"] and "'build'" in result["error"]
        assert "'compile'" in result["error"] and "version 1" in result["error"]
        assert f"agentd workflows retry {stale} --from" in result["error"]
        bad = daemon.cli("workflows", "retry", stale, "--from", "nosuch")
        assert bad.returncode == 1 and "no step 'nosuch'" in bad.stderr
        retried = daemon.cli_json("workflows", "retry", stale, "--from", "build")
        assert retried["version"] == "2"
        wait_for("waiting again", lambda: status(daemon, stale) == "waiting")
        daemon.cli_json("workflows", "signal", stale, "go")
        assert wait_done(daemon, stale)[1]["output"] == {"code": "v2"}
        effects = daemon.effects()
        assert effects.count("v1 b build step1") == 1 and effects.count("v2 b compile step1") == 1
        assert "v1 b ship step2" not in effects and effects.count("v2 b ship step2") == 1
        assert effects.count("v1 a ship step2") == 1 and "v2 a ship step2" not in effects
        version = daemon.query(
            "SELECT version FROM automation_runs WHERE instance_id = ?", (stale,)
        )[0][0]
        assert version == "2"
    finally:
        daemon.stop()
