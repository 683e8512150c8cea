"""`agentd run` start-up: what it imports, what it prints, what it does before it is ready."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.daemon_process import AGENTD, OWNER, TOKEN, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

HEAVY = ("aiogram", "anthropic", "mcp", "pypdf", "PIL", "onnxruntime", "numpy", "tokenizers")


def test_importing_the_daemon_loads_no_heavy_library() -> None:
    """The daemon module itself is light: aiogram loads in start-up's thread, the rest
    (documents, MCP, images, local embeddings) when first used."""
    code = "import sys, agentd.daemon; print(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    loaded = set(eval(out))  # a printed list of names
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)


def test_a_ready_daemon_has_mapped_no_native_library_it_has_not_used_yet(tmp_path: Path) -> None:
    """What the start-up imports beyond agentd.daemon (memory search, the tools, the
    capabilities) stays light too: once ready and before any message, the process has mapped
    no numpy, ONNX Runtime or Pillow extension (each would stay resident for good)."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        daemon = Daemon(tmp_path, daemon_env(tmp_path, tg.base_url, llm.base_url)).start()
        try:
            assert daemon.proc is not None
            maps = Path(f"/proc/{daemon.proc.pid}/maps").read_text()
        finally:
            assert daemon.stop() == 0
    mapped = {line.split()[-1] for line in maps.splitlines() if line.endswith(".so")}
    native = {path for path in mapped if any(f"/{lib}/" in path for lib in NATIVE)}
    assert not native, sorted(native)


NATIVE = ("numpy", "onnxruntime", "PIL")


def test_run_says_starting_and_ready_on_a_terminal_and_answers_the_waiting_message(
    tmp_path: Path,
) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_message(OWNER, OWNER, "waiting since before start-up")
        env = daemon_env(tmp_path, tg.base_url, llm.base_url)
        master, slave = pty.openpty()
        proc = subprocess.Popen([*AGENTD, "run"], env=env, cwd=tmp_path, stdout=slave, stderr=slave)
        os.close(slave)
        try:
            tg.wait_for_sent(1, timeout=60)
            terminal = b""
            while b"ready in" not in terminal:
                terminal += os.read(master, 4096)
            proc.terminate()
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            os.close(master)
    output = terminal.decode()
    human = [line.strip() for line in output.splitlines() if line.startswith("agentd: ")]
    assert human[0].startswith(f"agentd: starting (pid {proc.pid}; config: ")
    assert human[1].startswith("agentd: ready in ") and human[1].endswith(" s as @fake_bot")
    assert len(human) == 2


def test_no_human_lines_off_a_terminal(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        daemon = Daemon(tmp_path, daemon_env(tmp_path, tg.base_url, llm.base_url)).start()
        assert daemon.stop() == 0
    assert "agentd: " not in daemon.log()  # under systemd the journal gets only the JSON log
    # The tools are one line at INFO: how many, and the high-risk ones by name.
    registered = [e for e in _entries(daemon.log()) if e.get("event") == "tools registered"]
    assert len(registered) == 1 and "tools" not in registered[0], registered
    assert registered[0]["count"] > 5 and isinstance(registered[0]["high_risk"], list)


def _entries(log: str) -> list[dict[str, object]]:
    found = []
    for line in log.splitlines():
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def test_missing_secrets_exit_2_before_contacting_telegram(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg:
        for missing in ("ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN"):
            env = {**daemon_env(tmp_path, tg.base_url, "http://127.0.0.1:9"), missing: ""}
            result = Daemon(tmp_path, env).cli("run")
            assert result.returncode == 78, result.stderr  # EX_CONFIG: systemd does not restart
            assert f"{missing} is not set" in result.stderr and "Traceback" not in result.stderr
            assert TOKEN not in result.stderr
        assert tg.calls("getMe") == []


def test_the_daemon_answers_through_the_official_sdk(tmp_path: Path) -> None:
    """Claude is reached through `anthropic` (imported in a thread while the daemon starts)."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.enqueue_text("Hello through the SDK.")
        daemon = Daemon(tmp_path, daemon_env(tmp_path, tg.base_url, llm.base_url)).start()
        try:
            tg.add_message(OWNER, OWNER, "hi")
            tg.wait_for_sent(1, timeout=60)
            assert [m["plain_text"] for m in tg.sent if m["chat_id"] == OWNER] == [
                "Hello through the SDK."
            ]
        finally:
            assert daemon.stop() == 0
    agent = llm.requests[0]["headers"].get("user-agent", "")
    assert agent.startswith("AsyncAnthropic/Python"), agent
