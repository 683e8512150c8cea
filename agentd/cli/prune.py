"""`agentd prune [--dry-run]`: apply retention now, in the same short batches as the daemon."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    new_table,
    out,
    print_json,
    print_table,
    transaction,
)

DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Only show what would go.")]
VacuumOption = Annotated[
    bool, typer.Option("--vacuum/--no-vacuum", help="VACUUM after, if enough of the file is free.")
]


def prune(
    dry_run: DryRunOption = False,
    vacuum: VacuumOption = True,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Delete what the retention settings call old: journals and runs, the channels' intake
    records, audit, usage detail (and history, with `message_days` set)."""
    from agentd.channels import kept_tables
    from agentd.retention import prune as retention

    cfg = config_or_exit(config)
    now = time.time()
    tables = kept_tables(cfg)
    batches: dict[str, Callable[[Any], int]] = {
        **{
            p: partial(retention.prune_batch, cfg=cfg.retention, part=p, now=now)
            for p in retention.PARTS
        },
        **{
            t.part: partial(retention.prune_table, cfg=cfg.retention, table=t, now=now)
            for t in tables
        },
    }
    with database(cfg, write=not dry_run) as conn:
        planned = retention.plan(conn, cfg.retention, now, tables)
        removed = dict.fromkeys(batches, 0)
        vacuum_note: str | None = "dry run" if dry_run else None
        if not dry_run:
            for part, batch in batches.items():
                while True:
                    with transaction(conn):  # one short batch at a time: the daemon keeps going
                        count = batch(conn)
                    removed[part] += count
                    if count == 0:
                        break
            vacuum_note = retention.vacuum_due(conn, cfg.retention, now) if vacuum else "off"
            if vacuum_note is None:
                conn.execute("VACUUM")
    data = {
        "dry_run": dry_run,
        "would_remove" if dry_run else "removed": planned.counts if dry_run else removed,
        "vacuumed": vacuum_note is None,
        "vacuum_skipped": vacuum_note,
    }
    if json:
        print_json(data)
        return
    table = new_table("part", "keep (days)", "would go" if dry_run else "removed")
    days = retention.keep_days(cfg.retention) | {t.part: t.days(cfg.retention) for t in tables}
    for part in batches:
        kept = f"{days[part]:g}" if days[part] else "for ever"
        table.add_row(part, kept, str(planned.counts[part] if dry_run else removed[part]))
    print_table(table)
    if not dry_run:
        out.print("VACUUM: done" if vacuum_note is None else f"VACUUM skipped: {vacuum_note}")
