"""The day's retention run through the real engine, for tests of what it prunes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentd.chat.kept import KeptTable
from agentd.config import RetentionConfig
from agentd.db import Database
from agentd.durable import Engine, FakeClock
from agentd.retention.workflow import (
    RETENTION_WORKFLOW,
    PruneInput,
    PruneOutput,
    Sweep,
    instance_id,
    make_retention_workflow,
)


async def daily_run(
    db: Database,
    cfg: RetentionConfig,
    now: float,
    *,
    sweeps: Mapping[str, Sweep] | None = None,
    tables: Sequence[KeptTable] = (),
) -> PruneOutput:
    """Run the retention workflow of the day `now` falls in, with a clock stopped at `now`,
    to its end; what it removed."""
    clock = FakeClock(start=now)
    engine = Engine(db, clock=clock, poll_interval=0.02)
    engine.register(make_retention_workflow(db, cfg, clock, sweeps, tables))
    await engine.run()
    try:
        iid = instance_id(now)
        await engine.start(
            RETENTION_WORKFLOW, PruneInput(day=iid[10:]), instance_id=iid, key=RETENTION_WORKFLOW
        )
        done = await engine.wait_for(iid, timeout=30)
    finally:
        await engine.shutdown(grace=0.2)
    assert done.status == "complete", done.error
    return PruneOutput.model_validate_json(done.output or "{}")
