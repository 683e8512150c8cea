"""Ctrl-C while a turn is in flight: `agentd run` says what it waits for (and for how long),
and a second Ctrl-C stops it at once; the turn resumes at the next start."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

GRACE = 60  # far longer than the test may take: only the second Ctrl-C can end it in time


def test_a_second_ctrl_c_stops_without_waiting_and_the_turn_resumes(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        env = daemon_env(
            tmp_path, tg.base_url, llm.base_url, AGENTD_ENGINE__SHUTDOWN_GRACE=str(GRACE)
        )
        daemon = Daemon(tmp_path, env).start()
        try:
            llm.hold()
            tg.add_message(OWNER, OWNER, "a slow question")
            llm.wait_for_held(1, timeout=60)
            assert daemon.proc is not None
            daemon.proc.send_signal(signal.SIGINT)
            daemon.wait_for_log(f"waiting up to {GRACE} s for the step(s) running in", 30)
            assert "stop again (Ctrl-C) to stop now" in daemon.log()
            begun = time.monotonic()
            daemon.proc.send_signal(signal.SIGINT)
            assert daemon.proc.wait(30) == 0
            assert time.monotonic() - begun < 20, "the second Ctrl-C did not stop it"
            assert "stopping now: unfinished steps resume at the next start" in daemon.log()
            llm.release()
            daemon.start()
            tg.wait_until(
                lambda: any(m["plain_text"] == "echo: a slow question" for m in tg.sent),
                60,
                "the turn answered after the restart",
            )
        finally:
            llm.release()
            daemon.stop()
