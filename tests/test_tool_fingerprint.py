"""A tool's fingerprint: the same in every process, different when its code,
schema or source changes; a call approved for one implementation never runs another."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentd.tools.fingerprint import fingerprint
from agentd.tools.plugins import load_plugins
from tests.daemon_process import OWNER, REPO_ROOT, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

PLUGIN = '''
from agentd.tools import ToolContext, tool
import os

@tool(risk="high")
async def wipe(ctx: ToolContext, path: str) -> str:
    """Wipe a path (pretend)."""
    with open(os.environ["AGENTD_TEST_EFFECTS"], "a") as f:
        f.write(f"wipe {BODY} {path}\\n")
    return "wiped"
'''


def write_plugin(folder: Path, body: str, name: str = "fp_plugin") -> None:
    (folder / f"{name}.py").write_text(PLUGIN.replace("{BODY}", body))


def printed_in_subprocess(folder: Path, name: str = "fp_plugin") -> str:
    code = (
        "import sys; from agentd.tools.plugins import load_plugins; "
        "from agentd.tools.fingerprint import fingerprint; "
        f"print(fingerprint(load_plugins([{name!r}])[0][0]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        # No .pyc: two edits in one second with one size would share it.
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return out.stdout.strip()


def test_the_fingerprint_is_stable_across_processes_and_follows_the_code(tmp_path: Path) -> None:
    write_plugin(tmp_path, "v1")
    first, second = printed_in_subprocess(tmp_path), printed_in_subprocess(tmp_path)
    assert first == second and len(first) == 64
    write_plugin(tmp_path, "v2")  # one constant in the body differs (same size: no pyc, above)
    assert printed_in_subprocess(tmp_path) != first
    write_plugin(tmp_path, "v1", name="fp_other")  # same code, another module: another source
    assert printed_in_subprocess(tmp_path, "fp_other") != first


def test_the_fingerprint_covers_schema_and_risk_free_fields(tmp_path: Path) -> None:
    sys.path.insert(0, str(tmp_path))
    try:
        write_plugin(tmp_path, "v1", name="fp_local")
        [tool], _ = load_plugins(["fp_local"])
    finally:
        sys.path.remove(str(tmp_path))
    described = tool.__class__(**{**tool.__dict__, "description": "Something else."})
    assert fingerprint(described) != fingerprint(tool)
    assert fingerprint(tool.with_risk("low")) == fingerprint(tool)  # risk is policy, not code


def test_a_call_approved_for_a_tool_that_changed_is_refused(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    write_plugin(plugins, "v1")
    (tmp_path / "agentd.toml").write_text(
        '[tools]\nplugins = ["fp_plugin"]\napproval_timeout = 120\n'
    )
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.enqueue_tool_use("wipe", {"path": "/srv"}, "toolu_fp1")
        llm.enqueue_text("It was not run.")
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp_path / "agentd.toml"),
            PYTHONPATH=f"{plugins}:{REPO_ROOT}",
        )
        tg.add_chat(OWNER, "private", OWNER)
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "wipe /srv")
            tg.wait_until(lambda: any(m["reply_markup"] for m in tg.sent), 30, "the card")
            approval = daemon.cli_json("pending")[0]
            assert daemon.stop() == 0
            write_plugin(plugins, "version 2")  # edited while the call waits (a new size: the
            # old .pyc, stamped with size and mtime in seconds, cannot be taken for it)
            daemon.start()
            assert daemon.cli("approve", approval["id"]).returncode == 0
            tg.wait_until(
                lambda: any(m["plain_text"] == "It was not run." for m in tg.sent), 30, "the answer"
            )
            assert not any(line.startswith("wipe") for line in daemon.effects())
            results = [
                b
                for r in llm.requests
                for m in r["body"]["messages"]
                if isinstance(m["content"], list)
                for b in m["content"]
                if b.get("type") == "tool_result"
            ]
            assert results and results[-1]["is_error"]
            assert "changed after the owner approved" in json.dumps(results[-1]["content"])
