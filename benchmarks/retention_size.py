"""Database size after a simulated year of 200 turns a day, with and without retention.

The rows of one turn are not made up: `agentd run` (subprocess, tests/daemon_process.py) answers
--sample real messages against the local fakes, and the rows those turns left in every table
(journal instance, steps, attempts, update record, audit entries, usage rows, messages) are the
templates. The year replays those templates (round-robin) --per-day times a day for --days days,
with fresh ids and timestamps spread over each day; then a copy is pruned as the daily
`retention` workflow would leave it on the last day (agentd.retention.prune, default [retention]),
and VACUUMed.

Prints: file size without retention, after pruning (freed pages still in the file), after
VACUUM, and the rows per table each way.

Usage: .venv/bin/python benchmarks/retention_size.py [--days 365] [--per-day 200] [--sample 8]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.channels import kept_tables, migrations
from agentd.config import Config, RetentionConfig
from agentd.db import open_sync
from agentd.retention import prune as retention
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

DAY = 86400.0
MESSAGES = [
    "What's a good way to keep basil alive on a windowsill in winter?",
    "Summarise the difference between TCP and UDP in three sentences.",
    "Remind me what I said about the car service last week.",
    "Draft a polite reply declining Thursday's meeting, suggest Friday morning instead.",
    "How many grams of flour are in a cup, roughly?",
    "Translate 'where is the train station' into Italian and Spanish.",
    "Give me a packing list for a two-day hiking trip in autumn.",
    "Explain what a SQLite WAL checkpoint does.",
]
TABLES = (
    "workflow_instances",
    "workflow_steps",
    "workflow_attempts",
    "workflow_events",
    "updates",
    "audit",
    "llm_usage",
    "messages",
)


def sample_turns(tmp: Path, n: int) -> Path:
    """Run n real turns through `agentd run`; return its database."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        daemon = Daemon(tmp, daemon_env(tmp, tg.base_url, llm.base_url)).start(timeout=180)
        try:
            for text in (MESSAGES * (n // len(MESSAGES) + 1))[:n]:
                tg.add_message(OWNER, OWNER, text)
                tg.wait_for_sent(len(tg.sent) + 1, timeout=60)
            daemon.wait_for_instances(n, timeout=60)
        finally:
            daemon.stop()
    return tmp / "agentd.db"


def templates(conn: Any) -> list[dict[str, list[dict[str, Any]]]]:
    """Every table's rows of each completed turn, keyed by table."""
    turns = []
    for iid, update_id in conn.execute(
        "SELECT i.id, u.update_id FROM workflow_instances i JOIN updates u ON u.instance_id = i.id "
        "WHERE i.workflow = 'turn' AND i.status = 'complete' ORDER BY i.seq"
    ).fetchall():

        def rows(sql: str, *params: Any) -> list[dict[str, Any]]:
            return [dict(r) for r in conn.execute(sql, params).fetchall()]

        turns.append(
            {
                "workflow_instances": rows("SELECT * FROM workflow_instances WHERE id = ?", iid),
                "workflow_steps": rows("SELECT * FROM workflow_steps WHERE instance_id = ?", iid),
                "workflow_attempts": rows(
                    "SELECT * FROM workflow_attempts WHERE instance_id = ?", iid
                ),
                "workflow_events": rows("SELECT * FROM workflow_events WHERE instance_id = ?", iid),
                "updates": rows("SELECT * FROM updates WHERE update_id = ?", update_id),
                "audit": rows("SELECT * FROM audit WHERE instance_id = ?", iid),
                "llm_usage": rows("SELECT * FROM llm_usage WHERE instance_id = ?", iid),
                "messages": rows("SELECT * FROM messages WHERE instance_id = ?", iid),
            }
        )
    return turns


def _insert(conn: Any, table: str, row: dict[str, Any]) -> None:
    names = ", ".join(row)
    conn.execute(
        f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
    )


def replay_year(
    conn: Any, turns: list[dict[str, list[dict[str, Any]]]], days: int, per_day: int, start: float
) -> None:
    """Insert days × per_day turns copied from the templates, with new ids and times."""
    time_cols = ("created_at", "updated_at", "finished_at", "started_at", "received_at", "at")
    n = 0
    for day in range(days):
        conn.execute("BEGIN")
        for k in range(per_day):
            n += 1
            at = start + day * DAY + k * (DAY / per_day)
            turn = turns[n % len(turns)]
            iid = f"tg-update-{n}"
            base = min(r["created_at"] for r in turn["workflow_instances"])
            for table in TABLES:
                for row in turn[table]:
                    new = dict(row)
                    new.pop("seq" if table == "workflow_instances" else "id", None)
                    if table == "workflow_instances":
                        new["id"] = iid
                    if "instance_id" in new and new["instance_id"] is not None:
                        new["instance_id"] = iid
                    if table == "updates":
                        new["update_id"] = n
                    for key in ("source_key", "event_id"):
                        if new.get(key):
                            new[key] = f"{new[key]}#{n}"
                    for col in time_cols:
                        if new.get(col) is not None:
                            new[col] = at + (new[col] - base)
                    _insert(conn, table, new)
        conn.execute("COMMIT")


def size(path: Path, conn: Any) -> int:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def counts(conn: Any) -> dict[str, int]:
    return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--per-day", type=int, default=200)
    parser.add_argument("--sample", type=int, default=8)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="agentd-retention-"))
    try:
        (tmp / "sample").mkdir()
        sample = open_sync(sample_turns(tmp / "sample", args.sample))
        turns = templates(sample)
        sample.close()
        per_turn = {t: sum(len(x[t]) for x in turns) / len(turns) for t in TABLES}
        print(
            f"rows per real turn ({len(turns)} sampled): "
            + ", ".join(f"{t} {v:g}" for t, v in per_turn.items())
        )

        year = tmp / "year.db"
        conn = open_sync(year)
        from agentd.db.migrations import apply_migrations

        apply_migrations(conn, migrations())
        start = time.time() - args.days * DAY
        t0 = time.perf_counter()
        replay_year(conn, turns, args.days, args.per_day, start)
        end = start + args.days * DAY
        without = size(year, conn)
        before = counts(conn)
        conn.close()
        print(
            f"simulated {args.days} days × {args.per_day} turns in {time.perf_counter() - t0:.0f} s"
        )

        pruned_path = tmp / "pruned.db"
        shutil.copy(year, pruned_path)
        conn = open_sync(pruned_path)
        cfg = RetentionConfig(batch_size=5000)
        t0 = time.perf_counter()
        batches = [
            lambda c, p=part: retention.prune_batch(c, cfg, p, end) for part in retention.PARTS
        ]
        batches += [
            lambda c, t=table: retention.prune_table(c, cfg, t, end)
            for table in kept_tables(Config())  # the channels' own: Telegram's update records
        ]
        for batch in batches:
            while True:
                conn.execute("BEGIN IMMEDIATE")
                removed = batch(conn)
                conn.execute("COMMIT")
                if not removed:
                    break
        prune_s = time.perf_counter() - t0
        pruned = size(pruned_path, conn)
        free = retention.free_ratio(conn)
        t0 = time.perf_counter()
        conn.execute("VACUUM")
        vacuum_s = time.perf_counter() - t0
        vacuumed = size(pruned_path, conn)
        after = counts(conn)
        conn.close()

        mb = 1024 * 1024
        print(f"without retention:           {without / mb:8.1f} MiB")
        print(
            f"with retention, pruned:      {pruned / mb:8.1f} MiB  ({free:.0%} of it free pages; "
            f"prune took {prune_s:.1f} s)"
        )
        print(
            f"with retention, VACUUMed:    {vacuumed / mb:8.1f} MiB  "
            f"(ratio {vacuumed / without:.2f}; VACUUM took {vacuum_s:.1f} s)"
        )
        print("rows per table (without → with retention):")
        for t in TABLES:
            print(f"  {t:20s} {before[t]:9d} → {after[t]:9d}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
