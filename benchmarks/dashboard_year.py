"""The dashboard on a year of daily use: how long each page takes, served over loopback.

Builds a database through the real migrations holding a year of an owner's use (by default
40 turns a day, each with its journal, model calls, messages and audit rows; daily schedule
runs; memories; decided approvals; an automation's runs), then signs in and fetches every
page through aiohttp's client, as a browser would (no browser: this times the server).

    .venv/bin/python benchmarks/dashboard_year.py [--db /tmp/dash_year.db] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp.test_utils import TestClient, TestServer

from agentd.access import approvals
from agentd.dashboard import auth, spend
from agentd.dashboard.access import FileAccess
from agentd.dashboard.config import DashboardConfig
from agentd.dashboard.server import Site, make_app
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.durable import store
from agentd.ledger import audit
from tests import dashboard_seed as seed

DAY = 86400
STEPS = ("save-user", "rate-check", "load-history", "recall", "llm#1", "send#1", "save-reply")


def _turn(conn: Any, n: int, at: float) -> str:
    status = "errored" if n % 200 == 0 else "complete"
    iid = seed.turn(conn, n, at, f"message {n}: what is on my calendar?", status=status)
    for ordinal, name in enumerate(STEPS, start=3):  # seed.turn wrote ordinals 0-2
        store.record_step(
            conn,
            iid,
            ordinal,
            name,
            delivery="at_least_once",
            attempt=1,
            started_at=at + ordinal * 0.1,
            now=at + ordinal * 0.1 + 0.02,
            result='{"ok": true}',
        )
    if n % 25 == 0:
        approval = seed.waiting_approval(conn, n + 10_000_000, at, "send_mail", f"to {n}")
        approvals.decide(conn, approval, approve=n % 50 == 0, by="telegram:1001", now=at + 30)
    return iid


def _day(conn: Any, day: int, start: float, per_day: int, n: int) -> int:
    at = start + day * DAY
    for i in range(per_day):
        _turn(conn, n, at + 8 * 3600 + i * 600)
        n += 1
    for s in range(5):
        conn.execute(
            "INSERT INTO schedule_runs (schedule_id, due, outcome, at, instance_id, detail) "
            "VALUES (?, ?, 'started', ?, ?, '')",
            (f"s{s}", at + s * 3600, at + s * 3600, f"sched-s{s}-{int(at)}"),
        )
    for m in range(3):
        seed.memory(conn, at, f"fact {day}.{m}: the owner likes tea at {m + 7} o'clock", "chat")
    audit.record(conn, "memory_summary", chat_id=seed.CHAT, at=at + 20 * 3600)
    return n


def build(path: Path, days: int, per_day: int) -> None:
    conn = open_sync(path, synchronous="NORMAL")
    apply_migrations(conn)
    start = time.time() - days * DAY
    conn.execute("BEGIN IMMEDIATE")
    for s in range(5):
        seed.schedule(conn, f"s{s}", start, f"daily briefing {s}")
    for k in range(20):
        seed.skill(conn, f"skill-{k}", f"does thing {k}", start)
    n = 1
    for day in range(days):
        n = _day(conn, day, start, per_day, n)
        if day % 30 == 29:
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
    seed.waiting_approval(conn, 99_999_999, time.time(), "delete_file", "/tmp/x")
    # The year was written after the migration that rolls up finished days: roll it up now,
    # as that migration does on a database that lived through the year.
    conn.execute("DELETE FROM kv WHERE key = ?", (spend.UNTIL_KEY,))
    spend.roll_up(conn)
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def _pages(turn: int) -> list[str]:
    return [
        "/",
        "/conversations",
        f"/conversations/{seed.CHAT}",
        f"/turn/tg-update-{turn}",
        "/approvals",
        "/cost",
        "/cost?days=365",
        "/memory",
        "/memory?q=tea",
        "/schedules",
        "/skills",
        "/audit",
        "/audit?kind=turn&hours=168",
    ]


async def measure(path: Path, rounds: int, turn: int) -> dict[str, list[float]]:
    site = Site(FileAccess(path), DashboardConfig(), daily_tokens=10_000_000)
    conn = open_sync(path)
    conn.execute("BEGIN IMMEDIATE")
    token = auth.new_login(conn, minutes=5, made_by="benchmark")
    conn.execute("COMMIT")
    conn.close()
    times: dict[str, list[float]] = {p: [] for p in _pages(turn)}
    async with TestClient(TestServer(make_app(site))) as client:
        origin = str(client.make_url("/")).rstrip("/")
        await client.post("/login", data={"t": token}, headers={"Origin": origin})
        for _ in range(rounds):
            for page in times:
                began = time.perf_counter()
                response = await client.get(page)
                await response.read()
                times[page].append((time.perf_counter() - began) * 1000)
                assert response.status == 200, (page, response.status)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--turns-per-day", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--db", type=Path, help="Keep the generated database here.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "year.db"
        if not path.exists():
            began = time.perf_counter()
            build(path, args.days, args.turns_per_day)
            print(
                f"built {path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - began:.0f} s"
            )
        conn = open_sync(path)
        counts = {
            t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in (
                "workflow_instances",
                "workflow_steps",
                "llm_usage",
                "messages",
                "audit",
                "memories",
                "approvals",
                "schedule_runs",
            )
        }
        conn.close()
        print(", ".join(f"{k} {v:,}" for k, v in counts.items()))
        print(f"load average {os.getloadavg()[0]:.2f}")
        times = asyncio.run(measure(path, args.rounds, counts["messages"] // 4))
    print(f"{'page':32} {'p50 ms':>8} {'p95 ms':>8}")
    for page, found in times.items():
        found.sort()
        p95 = found[min(len(found) - 1, int(len(found) * 0.95))]
        print(f"{page:32} {statistics.median(found):8.1f} {p95:8.1f}")


if __name__ == "__main__":
    main()
