"""A channel's own tables in retention: the channel declares them (`Channel.kept`), the
daily run and `agentd prune` prune them beside the core's parts (`retention.prune`).

Each channel keeps rows only it reads (what its intake took, its own transcript); retention
treats them as it treats its own parts, in the same short batches, naming no network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agentd.config import RetentionConfig
from agentd.durable import store

# Which `[retention]` setting a table follows: what intake took (`update_days`) or the
# conversation's words (`message_days`).
Keep = Literal["update_days", "message_days"]
_OPEN = repr(store.OPEN_STATUSES)


@dataclass(frozen=True)
class KeptTable:
    """One table a channel keeps: its rows go after the days its `keep` setting names."""

    part: str  # its name in `agentd prune` and in the daily run's output
    keep: Keep
    count: Callable[[Any, float], int]  # (conn, cutoff): rows that would go now
    prune: Callable[[Any, float, int], int]  # (conn, cutoff, batch): remove some; how many

    def days(self, cfg: RetentionConfig) -> float:
        return float(getattr(cfg, self.keep))

    def cutoff(self, cfg: RetentionConfig, now: float) -> float | None:
        days = self.days(cfg)
        return now - days * 86400.0 if days > 0 else None


def intake_records(part: str, table: str) -> KeptTable:
    """A table of what a channel's intake took, by `received_at`, each row naming the workflow
    instance it started (`instance_id`): a row stays while that instance is open, since a
    redelivery of its message must still be known as one."""
    old = (
        f"FROM {table} WHERE received_at < ? AND (instance_id IS NULL OR instance_id NOT IN "
        f"(SELECT id FROM workflow_instances WHERE status IN {_OPEN}))"
    )

    def count(conn: Any, cut: float) -> int:
        return int(conn.execute(f"SELECT COUNT(*) {old}", (cut,)).fetchone()[0])

    def prune(conn: Any, cut: float, batch: int) -> int:
        return int(
            conn.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid {old} LIMIT ?)", (cut, batch)
            ).rowcount
        )

    return KeptTable(part=part, keep="update_days", count=count, prune=prune)
