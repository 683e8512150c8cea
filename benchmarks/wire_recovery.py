"""How fast agentd answers again after a Telegram outage.

`agentd run` runs as a subprocess with the production retry settings (`telegram.
retry_base_delay` 0.5 s, `telegram.max_backoff` 5 s) behind tests/fakes/fault_proxy.py, in
front of the Telegram and Anthropic fakes. Each round:

  baseline  a message with no fault: time from adding it to the fake to its reply
  outage    getUpdates fails --failures times in a row (nginx 502 pages, as a proxy in front
            of a restarting Bot API server sends); the message is added when the last failure
            has been served, so the figure is: server healthy again → reply seen

The ratio outage / baseline says what the backoff costs after the server recovers. Before the
backoff was capped it doubled to 30 s (seen: ~78 s after 8 failures).

Usage: .venv/bin/python benchmarks/wire_recovery.py [--failures 8] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.fault_proxy import FaultProxy


def reply_after(tg: FakeTelegram, text: str) -> float:
    """Add a message; seconds until its echo reaches the fake."""
    start = time.time()
    tg.add_message(OWNER, OWNER, text)
    answer = f"echo: {text}"
    tg.wait_until(lambda: any(m["plain_text"] == answer for m in tg.sent), 120, answer)
    return time.time() - start


def _rounded(values: list[float]) -> list[float]:
    return [round(v, 3) for v in values]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--failures", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as llm,
        FaultProxy.running(tg.base_url, "telegram") as proxy,
    ):
        env = daemon_env(
            Path(tmp),
            proxy.base_url,
            llm.base_url,
            AGENTD_TELEGRAM__RETRY_BASE_DELAY="0.5",
            AGENTD_TELEGRAM__MAX_BACKOFF="5",
            AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
        )
        daemon = Daemon(Path(tmp), env).start(timeout=120)
        try:
            reply_after(tg, "warm-up")
            baseline, outage = [], []
            for n in range(args.rounds):
                baseline.append(reply_after(tg, f"baseline {n}"))
                proxy.fail("getUpdates", "status", status=502, body="html", times=args.failures)
                proxy.wait_until(lambda: not proxy.pending_faults(), 300, "the outage")
                outage.append(reply_after(tg, f"after outage {n}"))
        finally:
            daemon.stop()
    base, out = statistics.median(baseline), statistics.median(outage)
    print(f"rounds: {args.rounds}; consecutive getUpdates failures per outage: {args.failures}")
    print(f"baseline reply latency (median): {base * 1000:.0f} ms  {_rounded(baseline)}")
    print(f"server healthy → reply (median): {out * 1000:.0f} ms  {_rounded(outage)}")
    print(f"ratio: {out / base:.1f}x")


if __name__ == "__main__":
    main()
