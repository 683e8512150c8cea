"""What a watch costs: a simulated month of a 15-minute page watch against a recurring prompt on
the same page, and the idle CPU and memory of `agentd run` with 20 watches configured.

Part 1 (in one process, tests/watch_rig.py): the real check workflow on the real engine and
database with a FakeClock, reading a local page through the SSRF-safe fetch (tests/fakes/site),
deciding through the real Anthropic client against the fake server (tests/fakes/anthropic, which
counts tokens at ~4 characters each). The page (--page-kb of product text) changes twice a week:
its price drops under the owner's threshold on Mondays and goes back up on Thursdays. The
baseline is a recurring prompt on the same page at the same interval, sent through the same
client and fake: one call per tick with the page and the request in it. That is a lower bound
of what a prompt schedule costs: agentd's prompt schedule also sends its system prompt and
tool definitions and fetches the page with a tool call (two calls a tick).

Part 2 (`agentd run` as a subprocess, tests/daemon_process.py): the same database started with
no watches, then with --watches page watches every 15 minutes (added the way `agentd watch add`
does, straight into SQLite while the daemon is down); once every watch's first check is
recorded, idle CPU (utime + stime from /proc/<pid>/stat) over --idle seconds and VmRSS.

Usage: .venv/bin/python benchmarks/watch_cost.py [--days 30] [--watches 20] [--idle 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.llm.types import LLMRequest, Message, SystemBlock
from agentd.watch.create import WatchRequest, create, timing
from agentd.watch.model import Source
from tests.daemon_process import OWNER, Daemon, daemon_env, poll
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.site import FakeSite
from tests.watch_rig import START, responder, watch_rig

TICK = os.sysconf("SC_CLK_TCK")
EVERY = 15 * 60
DAY = 86400
CONDITION = "the price drops under 200 EUR"
NAIVE_SYSTEM = "You are a personal assistant. Be concise."


def page_text(price: int, kb: int) -> str:
    """A product page as text: a price line among --page-kb of description and reviews."""
    lines = ["Camera shop", "Fujifilm X100VI — silver", f"Price: {price} EUR (incl. VAT)"]
    n = 0
    while sum(len(x) + 1 for x in lines) < kb * 1024:
        n += 1
        lines.append(
            f"Review {n}: a compact camera with a fixed 23 mm lens, film simulations and a "
            f"hybrid viewfinder; reviewer {n} rates it {3 + n % 3} of 5."
        )
    return "\n".join(lines) + "\n"


def price_at(t: float) -> int:
    """Down on Mondays from 10:00, up again on Thursdays from 10:00 (two changes a week)."""
    day = int((t - START) // DAY)
    weekday = (4 + day) % 7  # START is a Friday
    hour = ((t - START) % DAY) / 3600 + 8
    week_part = weekday + hour / 24
    return 189 if 0 + 10 / 24 <= week_part < 3 + 10 / 24 else 249


def cheap_now(shown: str) -> bool:
    """What the fake model decides: the price now (a diff's + line, or the first read) < 200."""
    if "Current content" in shown:
        return "Price: 189 EUR" in shown
    return "+Price: 189 EUR" in shown


async def simulate(days: int, kb: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-watch-"))
    try:
        async with FakeSite.serving() as site, watch_rig(tmp) as (rig, fake):
            watch = responder(cheap_now, "Down to 189 EUR.")
            # The recurring prompt's answer is as short as a verdict: only its input differs.
            fake.set_responder(lambda body: watch(body) or "Still 249 EUR; nothing to report.")
            url = site.raw("/x100", page_text(price_at(START), kb).encode(), "text/plain")
            await rig.add(
                "wbench",
                label="X100 price",
                condition=CONDITION,
                source=Source(kind="page", url=url, focus=""),
                every="15m",
            )
            naive_tokens = naive_calls = 0
            started = time.perf_counter()
            ticks = days * DAY // EVERY
            await rig.advance(60)  # the first check (due at once) runs on time
            for _ in range(ticks):
                now = rig.clock.now() + EVERY
                text = page_text(price_at(now), kb)
                site.raw("/x100", text.encode(), "text/plain")
                await rig.advance(EVERY, hop=EVERY)
                req = LLMRequest(
                    purpose="turn",
                    system=[SystemBlock(text=NAIVE_SYSTEM)],
                    messages=[
                        Message(
                            role="user",
                            content=f"Scheduled task: check {url} and tell me only if "
                            f"{CONDITION}.\n\nThe page:\n{text}",
                        )
                    ],
                    max_tokens=200,
                )
                answer = await rig.llm.complete(req)
                u = answer.usage
                naive_tokens += u.input_tokens + u.cache_read_tokens + u.output_tokens
                naive_calls += 1
            elapsed = time.perf_counter() - started
            outcomes = await rig.outcomes("wbench")

            def spent(conn: object) -> tuple[int, int]:
                row = conn.execute(  # type: ignore[attr-defined]
                    "SELECT COUNT(*), COALESCE(SUM(input_tokens + cache_read_tokens + "
                    "cache_write_tokens + output_tokens), 0) FROM llm_usage WHERE purpose = 'watch'"
                ).fetchone()
                return int(row[0]), int(row[1])

            calls, tokens = await rig.db.read(spent)
            return {
                "ticks": len(outcomes),
                "unchanged": outcomes.count("unchanged"),
                "quiet": outcomes.count("quiet"),
                "told": outcomes.count("told"),
                "other": ", ".join(
                    f"{o} {outcomes.count(o)}"
                    for o in sorted(set(outcomes) - {"unchanged", "quiet", "told"})
                )
                or "none",
                "messages": len(rig.outbox.sent),
                "watch_calls": calls,
                "watch_tokens": tokens,
                "naive_calls": naive_calls,
                "naive_tokens": naive_tokens,
                "page_tokens": len(text) // 4,
                "seconds": elapsed,
            }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def add_watches(db: Path, n: int, url: str, config: object) -> None:
    conn = open_sync(db)
    apply_migrations(conn)
    try:
        conn.execute("BEGIN")
        for i in range(n):
            req = WatchRequest(
                label=f"page {i}",
                condition=CONDITION,
                source=Source(kind="page", url=url),
                every="15m",
            )
            now = time.time()
            create(
                conn,
                req,
                timing(req, now=now, config=config),  # type: ignore[arg-type]
                watch_id=f"wb{i:03d}",
                user_id=OWNER,
                chat_id=OWNER,
                chat_kind="private",
                now=now,
                config=config,
                by="bench",  # type: ignore[arg-type]
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def first_checks(daemon: Daemon, n: int) -> None:
    """Every watch checked once, and each next check asleep until it is due."""
    count = "SELECT COUNT(*) FROM watch_checks"
    poll(lambda: daemon.query(count)[0][0] >= n, 120, "every watch's first check")
    busy = (
        "SELECT COUNT(*) FROM workflow_instances WHERE status IN ('queued', 'running', 'waiting')"
    )
    poll(lambda: daemon.query(busy)[0][0] == 0, 60, "every instance asleep or done")


def measure_daemon(watches: int, idle: float) -> list[tuple[str, float, float]]:
    from agentd.config import Config

    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-watch-idle-"))
    rows: list[tuple[str, float, float]] = []
    try:
        with (
            FakeTelegram.running() as tg,
            FakeAnthropic.running() as llm,
            FakeSite.running() as site,
        ):
            url = site.raw("/p", page_text(249, 8).encode(), "text/plain")
            (tmp / "agentd.toml").write_text('[tools.fetch]\nallowed_hosts = ["127.0.0.1"]\n')
            env = daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp / "agentd.toml"))
            tg.add_chat(OWNER)
            llm.set_responder(responder(lambda shown: False, ""))
            for n in (0, watches):
                sent = len(tg.sent)
                if n:
                    config = Config.model_validate({"access": {"allowed_user_ids": [OWNER]}})
                    add_watches(tmp / "agentd.db", n, url, config)
                daemon = Daemon(tmp, env)
                try:
                    daemon.start(timeout=60)
                    pid = daemon.proc.pid  # type: ignore[union-attr]
                    # One chat turn in both runs, so both have loaded what a model call loads
                    # and the difference is the watches' own.
                    tg.add_message(OWNER, OWNER, f"hello {n}")
                    tg.wait_until(lambda s=sent: len(tg.sent) > s, 60, "the reply")
                    if n:  # each watch's first check (a decision: the page is new) is done
                        first_checks(daemon, n)
                    time.sleep(1.0)  # what is measured is idling, after the start's work
                    before = cpu_seconds(pid)
                    time.sleep(idle)
                    rows.append((f"{n} watches", cpu_seconds(pid) - before, rss_mb(pid)))
                    daemon.stop()
                finally:
                    if daemon.proc is not None and daemon.proc.poll() is None:
                        daemon.proc.kill()
                        daemon.proc.wait(10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--days", type=int, default=30, help="days of 15-minute checks to simulate")
    ap.add_argument("--page-kb", type=int, default=8, help="size of the page's text")
    ap.add_argument("--watches", type=int, default=20, help="watches for the idle measurement")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of idle measured")
    ap.add_argument("--skip-idle", action="store_true", help="only the simulated month")
    args = ap.parse_args()
    print(
        f"watch cost — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} at start"
    )
    r = asyncio.run(simulate(args.days, args.page_kb))
    size = f"{args.page_kb} KB page (~{r['page_tokens']:.0f} tokens)"
    print(
        f"\n{args.days} days of a 15-minute watch on a {size}, changing twice a week "
        f"({r['seconds']:.0f} s to simulate):"
    )
    print(
        f"  checks {r['ticks']:.0f}: {r['unchanged']:.0f} unchanged (0 tokens), {r['quiet']:.0f} "
        f"quiet, {r['told']:.0f} told, other: {r['other']}; messages {r['messages']:.0f}"
    )
    for name, calls, tokens in (
        ("watch", r["watch_calls"], r["watch_tokens"]),
        ("naive prompt", r["naive_calls"], r["naive_tokens"]),
    ):
        print(f"  {name + ':':<15} {calls:>6.0f} model calls, {tokens:>10,.0f} tokens")
    ratio = r["naive_tokens"] / max(1, r["watch_tokens"])
    fewer = r["naive_calls"] / max(1, r["watch_calls"])
    print(f"  → {ratio:,.0f}× fewer tokens, {fewer:,.0f}× fewer calls")
    if args.skip_idle:
        return
    rows = measure_daemon(args.watches, args.idle)
    print(f"\nagentd run idle for {args.idle:g} s (after start-up and the first checks):")
    for name, cpu, rss in rows:
        print(
            f"  {name:<12} CPU {cpu:6.2f} s ({100 * cpu / args.idle:5.2f} %)   VmRSS {rss:6.1f} MB"
        )
    (_, cpu0, rss0), (_, cpu1, rss1) = rows
    print(f"  → +{cpu1 - cpu0:.2f} s CPU, +{rss1 - rss0:.1f} MB with {args.watches} watches")


if __name__ == "__main__":
    main()
