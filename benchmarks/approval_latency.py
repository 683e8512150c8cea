"""How long an approval takes to reach the waiting turn: CLI `agentd approve` and button press.

Measures, through the real daemon and the fakes, the time from the decision (the CLI process
returning, or the callback update becoming available) to the model's next request.

    .venv/bin/python benchmarks/approval_latency.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

CONFIG = '[tools]\nplugins = ["tests.plugins.e2e_tools"]\napproval_timeout = 600\n'


def one_round(tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon, n: int, cli: bool) -> float:
    llm.enqueue_tool_use("delete_file", {"path": f"/tmp/{n}"}, f"toolu_{n}")
    llm.enqueue_text("done")
    asked = len([m for m in tg.sent if m["reply_markup"]])
    tg.add_message(OWNER, OWNER, f"delete /tmp/{n}")
    request = tg.wait_until(
        lambda: (m := [m for m in tg.sent if m["reply_markup"]]) and len(m) > asked and m[-1],
        30,
        "approval request",
    )
    before = len(llm.requests)
    if cli:
        approval_id = daemon.cli_json("pending")[0]["id"]
        daemon.cli("approve", approval_id)
    else:
        data = request["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        tg.add_callback_query(OWNER, OWNER, request["message_id"], data)
    decided = time.monotonic()
    llm.wait_until(lambda: len(llm.requests) > before, 30, "the next model call")
    latency = time.monotonic() - decided
    tg.wait_until(lambda: tg.sent[-1]["plain_text"] == "done", 30, "the answer")
    return latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as llm,
    ):
        path = Path(tmp)
        (path / "agentd.toml").write_text(CONFIG)
        env = daemon_env(
            path,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(path / "agentd.toml"),
            AGENTD_ENGINE__EVENT_POLL_INTERVAL="0.5",
            AGENTD_CHAT__STREAMING="false",
        )
        daemon = Daemon(path, env).start()
        try:
            for mode, cli in (("cli", True), ("button", False)):
                samples = [
                    one_round(tg, llm, daemon, i + (100 if cli else 0), cli)
                    for i in range(args.rounds)
                ]
                p50, worst = statistics.median(samples) * 1000, max(samples) * 1000
                print(
                    f"{mode:6s} approval → next model call: p50 {p50:.0f} ms, "
                    f"max {worst:.0f} ms over {len(samples)} rounds (event_poll_interval 0.5 s)"
                )
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
