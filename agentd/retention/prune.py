"""Retention: old journals, audit and usage detail go; history stays.

Every prune is a short batch (one transaction of at most `batch_size` rows), so the daemon's
single writer is never held long enough to delay a turn. Only *finished* workflow instances
are removed: nothing a running, waiting or sleeping workflow needs is ever deleted. The
channels' own tables (what their intake took) are declared by each channel
(`chat.kept`) and pruned beside these parts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel

from agentd.chat.kept import KeptTable
from agentd.config import RetentionConfig
from agentd.durable import store

DAY = 86400.0
BACKUP_KEY = "backup_running"  # kv row the CLI holds while `agentd backup` copies the file
BACKUP_STALE_SECONDS = 6 * 3600  # a backup marker this old belongs to a process that died
DAILY_STEP = "(daily total)"
Part = Literal["workflows", "audit", "usage", "messages", "watch_checks", "schedule_runs", "media"]
PARTS: tuple[Part, ...] = (
    "workflows",
    "audit",
    "usage",
    "messages",
    "watch_checks",
    "schedule_runs",
    "media",
)
# Parts added once daily runs were journaled: the workflow prunes them after its vacuum step.
LATE_PARTS: tuple[Part, ...] = ("media",)
# Per watch and schedule, the newest rows `agentd watch|schedule show` lists stay at any age.
KEEP_LAST_RUNS = 50
FORECAST_DAYS = 7  # a watch's cost forecast measures its checks of the last week
_MEDIA = ("transcript_cache", "vision_cache")  # by content hash, each with its created_at
_FINAL = repr(store.FINAL_STATUSES)
_OPEN = repr(store.OPEN_STATUSES)


class PrunePlan(BaseModel):
    """How many rows each part would lose now (usage: detailed rows folded into daily ones)."""

    counts: dict[str, int]
    cutoffs: dict[str, float | None]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def keep_days(cfg: RetentionConfig) -> dict[str, float]:
    """How many days each part is kept (0: for ever)."""
    return {
        "workflows": cfg.workflow_days,
        "audit": cfg.audit_days,
        "usage": cfg.usage_detail_days,
        "messages": cfg.message_days,
        # Transcripts of voice notes and what images showed: the conversation's words too.
        "media": cfg.message_days,
        # A check or run is a line of an occurrence's journal: it goes when journals go.
        "watch_checks": cfg.workflow_days and max(cfg.workflow_days, FORECAST_DAYS),
        "schedule_runs": cfg.workflow_days,
    }


def cutoffs(cfg: RetentionConfig, now: float) -> dict[str, float | None]:
    return {part: (now - d * DAY if d > 0 else None) for part, d in keep_days(cfg).items()}


# Which old rows may go. Kept at any age: a row whose occurrence instance is still open (its
# INSERT OR IGNORE is what makes a resumed occurrence record and tell only once), the newest
# KEEP_LAST_RUNS of each watch or schedule, and a watch's first check (the forecast leaves that
# one-off read of the whole source out by its due time) and its last FORECAST_DAYS.
_OLD_CHECKS = (
    "FROM watch_checks c WHERE c.at < ? "
    "AND c.due > (SELECT MIN(f.due) FROM watch_checks f WHERE f.watch_id = c.watch_id) "
    "AND c.due < (SELECT n.due FROM watch_checks n WHERE n.watch_id = c.watch_id "
    f"ORDER BY n.due DESC LIMIT 1 OFFSET {KEEP_LAST_RUNS - 1}) "
    "AND NOT EXISTS (SELECT 1 FROM workflow_instances i WHERE i.id = "
    f"'sched-' || c.watch_id || '-' || CAST(c.due AS INTEGER) AND i.status IN {_OPEN})"
)
_OLD_RUNS = (
    "FROM schedule_runs r WHERE r.at < ? "
    "AND r.due < (SELECT n.due FROM schedule_runs n WHERE n.schedule_id = r.schedule_id "
    f"ORDER BY n.due DESC LIMIT 1 OFFSET {KEEP_LAST_RUNS - 1}) "
    "AND (r.instance_id IS NULL OR NOT EXISTS (SELECT 1 FROM workflow_instances i "
    f"WHERE i.id = r.instance_id AND i.status IN {_OPEN}))"
)
_COUNT = {
    "workflows": f"SELECT COUNT(*) FROM workflow_instances WHERE status IN {_FINAL} "
    "AND finished_at IS NOT NULL AND finished_at < ?",
    "audit": "SELECT COUNT(*) FROM audit WHERE at < ?",
    "usage": "SELECT COUNT(*) FROM llm_usage WHERE at < ? AND step IS NOT '(daily total)'",
    # With the history, the notices kept to quote (chat/quotable.py): sent messages too.
    "messages": "SELECT (SELECT COUNT(*) FROM messages WHERE created_at < ?1) "
    "+ (SELECT COUNT(*) FROM sent_notices WHERE sent_at < ?1)",
    "media": "SELECT (SELECT COUNT(*) FROM transcript_cache WHERE created_at < ?1) "
    "+ (SELECT COUNT(*) FROM vision_cache WHERE created_at < ?1)",
    "watch_checks": f"SELECT COUNT(*) {_OLD_CHECKS}",
    "schedule_runs": f"SELECT COUNT(*) {_OLD_RUNS}",
}


def plan(
    conn: Any, cfg: RetentionConfig, now: float, tables: Sequence[KeptTable] = ()
) -> PrunePlan:
    """What a prune at `now` would remove (for `agentd prune --dry-run`), the channels' own
    `tables` included."""
    limits = cutoffs(cfg, now)
    counts = {
        part: (conn.execute(_COUNT[part], (cut,)).fetchone()[0] if cut is not None else 0)
        for part, cut in limits.items()
    }
    for table in tables:
        counts[table.part] = count_table(conn, cfg, table, now)
        limits[table.part] = table.cutoff(cfg, now)
    return PrunePlan(counts=counts, cutoffs=limits)


def _prune_workflows(conn: Any, cut: float, batch: int) -> int:
    ids = [
        r[0]
        for r in conn.execute(
            f"SELECT id FROM workflow_instances WHERE status IN {_FINAL} "
            "AND finished_at IS NOT NULL AND finished_at < ? ORDER BY finished_at LIMIT ?",
            (cut, batch),
        ).fetchall()
    ]
    for iid in ids:
        # Steps and their attempts go with the instance (ON DELETE CASCADE); events by hand.
        conn.execute("DELETE FROM workflow_events WHERE instance_id = ?", (iid,))
        conn.execute(f"DELETE FROM workflow_instances WHERE id = ? AND status IN {_FINAL}", (iid,))
    return len(ids)


def _prune_audit(conn: Any, cut: float, batch: int) -> int:
    return conn.execute(
        "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < ? ORDER BY at LIMIT ?)",
        (cut, batch),
    ).rowcount


def _prune_messages(conn: Any, cut: float, batch: int) -> int:
    removed = conn.execute(
        "DELETE FROM messages WHERE id IN "
        "(SELECT id FROM messages WHERE created_at < ? ORDER BY id LIMIT ?)",
        (cut, batch),
    ).rowcount
    return (
        removed
        + conn.execute(
            "DELETE FROM sent_notices WHERE rowid IN "
            "(SELECT rowid FROM sent_notices WHERE sent_at < ? ORDER BY sent_at LIMIT ?)",
            (cut, batch),
        ).rowcount
    )


def _prune_media(conn: Any, cut: float, batch: int) -> int:
    removed = 0
    for table in _MEDIA:
        removed += conn.execute(
            f"DELETE FROM {table} WHERE rowid IN "
            f"(SELECT rowid FROM {table} WHERE created_at < ? ORDER BY created_at LIMIT ?)",
            (cut, batch),
        ).rowcount
    return removed


def _prune_checks(conn: Any, cut: float, batch: int) -> int:
    return conn.execute(
        "DELETE FROM watch_checks WHERE rowid IN "
        f"(SELECT c.rowid {_OLD_CHECKS} ORDER BY c.at LIMIT ?)",
        (cut, batch),
    ).rowcount


def _prune_runs(conn: Any, cut: float, batch: int) -> int:
    return conn.execute(
        "DELETE FROM schedule_runs WHERE rowid IN "
        f"(SELECT r.rowid {_OLD_RUNS} ORDER BY r.at LIMIT ?)",
        (cut, batch),
    ).rowcount


def _fold_usage(conn: Any, cut: float, batch: int) -> int:
    """Fold the oldest day that still has detailed rows into one row per chat, model, purpose."""
    row = conn.execute(
        "SELECT MIN(at) FROM llm_usage WHERE at < ? AND step IS NOT ?", (cut, DAILY_STEP)
    ).fetchone()
    if row[0] is None:
        return 0
    day = row[0] - row[0] % DAY
    end = min(day + DAY, cut)  # a day the cutoff splits keeps its recent rows in detail
    # The day's earlier daily totals are folded in again, so each day keeps one row per group.
    folded = conn.execute(
        "SELECT COUNT(*) FROM llm_usage WHERE at >= ? AND at < ? AND step IS NOT ?",
        (day, end, DAILY_STEP),
    ).fetchone()[0]
    top = conn.execute("SELECT MAX(id) FROM llm_usage").fetchone()[0]
    conn.execute(
        "INSERT INTO llm_usage (at, step, chat_id, purpose, model, calls, input_tokens, "
        "output_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens, "
        "audio_seconds) "
        "SELECT ?, ?, chat_id, purpose, model, SUM(calls), SUM(input_tokens), "
        "SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens), "
        "SUM(cache_write_1h_tokens), SUM(audio_seconds) FROM llm_usage "
        "WHERE at >= ? AND at < ? AND id <= ? GROUP BY chat_id, purpose, model",
        (day, DAILY_STEP, day, end, top),
    )
    conn.execute("DELETE FROM llm_usage WHERE at >= ? AND at < ? AND id <= ?", (day, end, top))
    return folded


_PRUNE = {
    "workflows": _prune_workflows,
    "audit": _prune_audit,
    "usage": _fold_usage,
    "messages": _prune_messages,
    "media": _prune_media,
    "watch_checks": _prune_checks,
    "schedule_runs": _prune_runs,
}


def prune_batch(conn: Any, cfg: RetentionConfig, part: Part, now: float) -> int:
    """One short batch of one part (call inside a write transaction); 0 when nothing is left."""
    cut = cutoffs(cfg, now)[part]
    return 0 if cut is None else _PRUNE[part](conn, cut, cfg.batch_size)


def free_ratio(conn: Any) -> float:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return free / pages if pages else 0.0


def backup_running(conn: Any, now: float) -> bool:
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (BACKUP_KEY,)).fetchone()
    return row is not None and now - float(row[0]) < BACKUP_STALE_SECONDS


def mark_backup(conn: Any, running: bool) -> None:
    if running:
        conn.execute(
            "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
            "SET value = excluded.value",
            (BACKUP_KEY, str(time.time())),
        )
    else:
        conn.execute("DELETE FROM kv WHERE key = ?", (BACKUP_KEY,))


def vacuum_due(conn: Any, cfg: RetentionConfig, now: float) -> str | None:
    """Why not to VACUUM now (None: go ahead)."""
    ratio = free_ratio(conn)
    if ratio < cfg.vacuum_free_ratio:
        return f"only {ratio:.0%} of the file is free (threshold {cfg.vacuum_free_ratio:.0%})"
    if backup_running(conn, now):
        return "a backup is running"
    return None


def prune_table(conn: Any, cfg: RetentionConfig, table: KeptTable, now: float) -> int:
    """One short batch of a channel's table (inside a write transaction); 0 when none left."""
    cut = table.cutoff(cfg, now)
    return 0 if cut is None else table.prune(conn, cut, cfg.batch_size)


def count_table(conn: Any, cfg: RetentionConfig, table: KeptTable, now: float) -> int:
    cut = table.cutoff(cfg, now)
    return 0 if cut is None else table.count(conn, cut)
