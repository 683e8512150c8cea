"""The daily prune as a durable workflow: one instance per day, each batch a journaled step."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from agentd.chat.kept import KeptTable
from agentd.config import RetentionConfig
from agentd.db import Database
from agentd.durable import Clock, Step, Workflow, workflow
from agentd.retention import prune as retention

log = logging.getLogger("agentd.retention")
RETENTION_WORKFLOW = "retention"
MAX_BATCHES_PER_PART = 200  # a big backlog is worked off over several runs, not one huge journal
OLD_SECOND = "updates"  # the part runs journaled by older code pruned right after the journals


class PruneInput(BaseModel):
    day: str  # UTC date the run belongs to; also its instance id


class PruneOutput(BaseModel):
    removed: dict[str, int] = Field(default_factory=dict)
    vacuumed: bool = False
    vacuum_skipped: str | None = None


def instance_id(now: float) -> str:
    return f"retention-{datetime.fromtimestamp(now, UTC).date().isoformat()}"


async def read_clock(clock: Clock) -> float:
    return clock.now()


async def prune_one_batch(db: Database, cfg: RetentionConfig, part: str, now: float) -> int:
    return await db.write(retention.prune_batch, cfg, part, now)


async def prune_table_batch(
    db: Database, cfg: RetentionConfig, table: KeptTable, now: float
) -> int:
    return await db.write(retention.prune_table, cfg, table, now)


async def vacuum_if_due(db: Database, cfg: RetentionConfig, now: float) -> str | None:
    """VACUUM when much of the file is free and no backup is copying it; else say why not."""
    reason = await db.read(retention.vacuum_due, cfg, now)
    if reason is None:
        started = time.perf_counter()
        await db.read(lambda c: c.execute("VACUUM"))
        log.info("database vacuumed", extra={"ms": round((time.perf_counter() - started) * 1e3)})
    return reason


Sweep = Callable[[float], int]  # what is older than its keep at `now` goes; how many


async def sweep_files(sweep: Sweep, now: float) -> int:
    return await asyncio.to_thread(sweep, now)  # files, off the event loop


def make_retention_workflow(
    db: Database,
    cfg: RetentionConfig,
    clock: Clock,
    sweeps: Mapping[str, Sweep] | None = None,
    tables: Sequence[KeptTable] = (),
) -> Workflow[PruneInput, PruneOutput]:
    """`sweeps`: what capabilities keep outside the database and purge daily too (the
    workspace trash), each one journaled step; `tables`: the channels' own tables."""

    async def batches(step: Step, part: str, fn: Callable[..., Awaitable[int]], *args: Any) -> int:
        removed = 0
        for n in range(1, MAX_BATCHES_PER_PART + 1):
            count = await step.do(f"prune:{part}#{n}", fn, db, cfg, *args)
            removed += count
            if count == 0:
                break
        return removed

    @workflow(RETENTION_WORKFLOW)
    async def prune(step: Step, inp: PruneInput) -> PruneOutput:
        now = await step.do("now", read_clock, clock)  # one cutoff per run, even on resume
        removed: dict[str, int] = {}
        left = list(tables)
        # A run journaled when Telegram's update records were a core part, second.
        second = next((t for t in left if t.part == OLD_SECOND), None)
        for part in [p for p in retention.PARTS if p not in retention.LATE_PARTS]:
            removed[part] = await batches(step, part, prune_one_batch, part, now)
            if second is not None and step.journaled_next() == f"prune:{OLD_SECOND}#1":
                removed[OLD_SECOND] = await batches(
                    step, OLD_SECOND, prune_table_batch, second, now
                )
                left.remove(second)
                second = None
        skipped = await step.do("vacuum", vacuum_if_due, db, cfg, now)
        # After the vacuum step: a run journaled before these came replays unchanged.
        for part in retention.LATE_PARTS:
            removed[part] = await batches(step, part, prune_one_batch, part, now)
        for name, sweep in (sweeps or {}).items():
            removed[name] = await step.do(f"sweep:{name}", sweep_files, sweep, now)
        for table in left:
            removed[table.part] = await batches(step, table.part, prune_table_batch, table, now)
        log.info("retention done", extra={"removed": removed, "vacuum_skipped": skipped})
        return PruneOutput(removed=removed, vacuumed=skipped is None, vacuum_skipped=skipped)

    return prune


async def run_daily(
    start: Callable[..., Awaitable[Any]], clock: Clock, stop: asyncio.Event
) -> None:
    """Start the day's prune (idempotent: one instance per UTC day); look again every hour."""
    while not stop.is_set():
        now = clock.now()
        try:
            await start(
                RETENTION_WORKFLOW,
                PruneInput(day=instance_id(now)[10:]),
                instance_id=instance_id(now),
                key=RETENTION_WORKFLOW,
            )
        except Exception:
            log.exception("could not start the daily prune; trying again later")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=3600)
