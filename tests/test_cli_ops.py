"""The operations commands against a database a short daemon run left behind."""

from __future__ import annotations

import json
from pathlib import Path

from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram


def test_usage_backup_and_doctor(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url)
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "hello")
            tg.wait_for_sent(1, timeout=20)
            daemon.wait_for_instances(1)

            usage = daemon.cli_json("usage")
            assert usage[0]["chat_id"] == OWNER and usage[0]["calls"] == 1
            assert usage[0]["input_tokens"] > 0 and usage[0]["estimated_cost_usd"] >= 0

            copy = tmp_path / "backup.db"
            result = daemon.cli("backup", str(copy))  # while the daemon runs
            assert result.returncode == 0, result.stderr
            assert copy.stat().st_mode & 0o077 == 0
            copied = Daemon(tmp_path, {**env, "AGENTD_STORAGE__PATH": str(copy)})
            assert [m["content"] for m in copied.cli_json("history")] == ["hello", "echo: hello"]
            assert daemon.cli("backup", str(copy)).returncode == 1  # never overwrites

            checks = {c["check"]: c for c in daemon.cli_json("doctor")}
            assert checks["telegram"]["ok"] and "fake_bot" in checks["telegram"]["detail"]
            assert checks["anthropic"]["ok"] and checks["sqlite-vec"]["ok"]
            assert checks["database"]["ok"]
            # The e2e daemons run the hashing embedder: doctor names it and warns, not fails.
            embedder = checks["embedder"]
            assert embedder["ok"] and embedder["warn"] and "hashing" in embedder["detail"]

        broken = Daemon(tmp_path, {**env, "TELEGRAM_BOT_TOKEN": "", "ANTHROPIC_API_KEY": ""})
        result = broken.cli("doctor", "--json")
        assert result.returncode == 1
        failed = {c["check"] for c in json.loads(result.stdout) if not c["ok"]}
        assert failed == {"telegram", "anthropic"}
