"""An owner on Telegram alone pays nothing for Matrix: `agentd run` without `[matrix]` never
imports mautrix, nor any of agentd.matrix but the channel's entry in the list (which only
answers "not configured"), measured in the running daemon by Python's own import log; the
Matrix end-to-end suite shows the same log does name mautrix when `[matrix]` is set."""

from __future__ import annotations

from pathlib import Path

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram


def imported(log: str) -> set[str]:
    """Top-level packages and agentd's own, from `-X importtime` lines in a log."""
    names = set()
    for line in log.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            names.add(name if name.startswith("agentd.") else name.split(".")[0])
    return names


def test_a_telegram_only_daemon_never_imports_matrix(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, PYTHONPROFILEIMPORTTIME="1")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "hello")
            tg.wait_for_sent(1, timeout=60)
            assert daemon.stop() == 0
            names = imported(daemon.log())
    assert "aiogram" in names and "agentd.daemon.process" in names  # the log is whole
    assert "mautrix" not in names
    loaded = {n for n in names if n.startswith("agentd.matrix")}
    # The channel's entry in the list, and what it declares: its section, its tables and
    # how retention keeps them (pruned whether the channel is configured or not).
    declared = {"config", "schema", "kept"}
    allowed = {"agentd.matrix", "agentd.matrix.channel", "agentd.matrix.ids"}
    assert loaded <= allowed | {f"agentd.matrix.{m}" for m in declared}, loaded
