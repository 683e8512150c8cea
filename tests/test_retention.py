"""Retention with an injected clock: what goes, what stays, and that nothing an open
workflow needs is ever deleted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentd.channels import kept_tables
from agentd.config import Config, RetentionConfig
from agentd.db import Database
from agentd.durable import Engine, FakeClock, Step, store, workflow
from agentd.hands.files import Workspaces
from agentd.hands.workspace import TRASH
from agentd.ledger import audit, usage
from agentd.llm.types import Usage
from agentd.memory import history
from agentd.retention import prune as retention
from agentd.retention.prune import prune_table
from agentd.retention.workflow import (
    RETENTION_WORKFLOW,
    PruneInput,
    PruneOutput,
    instance_id,
    make_retention_workflow,
)
from tests.retention_support import daily_run

DAY = 86400.0
T0 = 1_780_000_000.0  # the simulated "now"
CFG = RetentionConfig(batch_size=10)
TABLES = kept_tables(Config())  # every channel's own: Telegram's update records among them


def journal(conn: Any, iid: str, at: float, status: str, update_id: int) -> None:
    """An instance as a turn leaves it: steps, attempts, an event and its update row."""
    store.insert_instance(
        conn, instance_id=iid, workflow="turn", key=f"chat-{update_id}", input_json="{}", now=at
    )
    for ordinal in range(3):
        store.begin_step(conn, iid, ordinal, f"s{ordinal}", "do", at, attempt=1)
    store.insert_event(conn, iid, "approval:x", {"decision": "approved"}, at)
    store.set_status(conn, iid, status, at)
    conn.execute(
        "INSERT INTO updates (update_id, received_at, kind, outcome, instance_id) "
        "VALUES (?, ?, 'message', 'turn', ?)",
        (update_id, at, iid),
    )


def rows(conn: Any, sql: str, *params: Any) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


def count(conn: Any, table: str, iid: str) -> int:
    return rows(conn, f"SELECT COUNT(*) FROM {table} WHERE instance_id = ?", iid)


def seed(conn: Any) -> None:
    journal(conn, "old-done", T0 - 40 * DAY, "complete", 1)
    journal(conn, "old-errored", T0 - 31 * DAY, "errored", 2)
    journal(conn, "recent-done", T0 - 20 * DAY, "complete", 3)
    journal(conn, "old-waiting", T0 - 90 * DAY, "waiting", 4)  # an approval wait from long ago
    journal(conn, "old-sleeping", T0 - 200 * DAY, "sleeping", 5)  # a far-off reminder
    conn.execute(
        "INSERT INTO updates (update_id, received_at, kind, outcome) "
        "VALUES (6, ?, 'message', 'reject')",
        (T0 - 8 * DAY,),
    )
    for n in range(25):
        audit.record(conn, "turn", chat_id=1, at=T0 - 400 * DAY + n)
    audit.record(conn, "turn", chat_id=1, at=T0 - 300 * DAY)
    history.save_message(
        conn,
        chat_id=1,
        user_id=1,
        role="user",
        content="years ago",
        source_key="m1",
        created_at=T0 - 1000 * DAY,
    )


def add_usage(conn: Any, at: float, chat: int, tokens: int) -> None:
    usage.record(
        conn,
        Usage(input_tokens=tokens, output_tokens=tokens // 2),
        model="m",
        purpose="turn",
        chat_id=chat,
    )
    conn.execute("UPDATE llm_usage SET at = ? WHERE id = (SELECT MAX(id) FROM llm_usage)", (at,))


@pytest.fixture
async def seeded(db: Database) -> Database:
    await db.write(seed)
    return db


async def test_plan_counts_only_what_may_go(seeded: Database) -> None:
    planned = await seeded.read(retention.plan, CFG, T0, TABLES)
    # Updates 1, 2, 3 and 6 are over 7 days old; 4 and 5 started workflows that are still open.
    assert planned.counts == {
        "workflows": 2,
        "audit": 25,
        "usage": 0,
        "messages": 0,
        "media": 0,
        "watch_checks": 0,
        "schedule_runs": 0,
        "updates": 4,
        "matrix_events": 0,
        "matrix_ids": 0,
        "matrix_buttons": 0,
        "matrix_early_reactions": 0,
        "matrix_drafts": 0,
        "webchat_messages": 0,
    }


async def test_prune_keeps_open_workflows_and_what_they_need(seeded: Database) -> None:
    for part in retention.PARTS:
        while await seeded.write(retention.prune_batch, CFG, part, T0):
            pass
    for table in TABLES:
        while await seeded.write(prune_table, CFG, table, T0):
            pass

    def check(conn: Any) -> None:
        left = {r[0] for r in conn.execute("SELECT id FROM workflow_instances")}
        assert left == {"recent-done", "old-waiting", "old-sleeping"}
        for iid in ("old-waiting", "old-sleeping"):  # steps, attempts, events, update row
            assert count(conn, "workflow_steps", iid) == 3
            assert count(conn, "workflow_attempts", iid) == 3
            assert (
                rows(conn, "SELECT COUNT(*) FROM workflow_events WHERE instance_id = ?", iid) == 1
            )
            assert count(conn, "updates", iid) == 1
        for gone in ("old-done", "old-errored"):
            assert (
                rows(conn, "SELECT COUNT(*) FROM workflow_steps WHERE instance_id = ?", gone) == 0
            )
            assert count(conn, "workflow_attempts", gone) == 0
            assert (
                rows(conn, "SELECT COUNT(*) FROM workflow_events WHERE instance_id = ?", gone) == 0
            )
        assert {r[0] for r in conn.execute("SELECT update_id FROM updates")} == {4, 5}
        assert rows(conn, "SELECT COUNT(*) FROM audit") == 1
        assert rows(conn, "SELECT COUNT(*) FROM messages") == 1  # history is kept by default

    await seeded.read(check)
    assert (await seeded.read(retention.plan, CFG, T0, TABLES)).total == 0


async def test_usage_detail_is_folded_per_day_and_totals_stay_exact(db: Database) -> None:
    def fill(conn: Any) -> None:
        for n in range(30):  # 30 calls on one old day, two chats
            add_usage(conn, T0 - 100 * DAY + n * 60, chat=1 + n % 2, tokens=100 + n)
        add_usage(conn, T0 - 10 * DAY, chat=1, tokens=7)  # recent: kept in detail

    await db.write(fill)
    before = await db.read(usage.totals)
    assert await db.write(retention.prune_batch, CFG, "usage", T0) == 30
    assert await db.write(retention.prune_batch, CFG, "usage", T0) == 0
    assert await db.read(usage.totals) == before  # same calls and tokens per day and chat
    assert await db.read(lambda c: rows(c, "SELECT COUNT(*) FROM llm_usage")) == 3


async def test_messages_go_only_when_the_owner_says_so(seeded: Database) -> None:
    cfg = RetentionConfig(message_days=365)
    assert await seeded.write(retention.prune_batch, cfg, "messages", T0) == 1


async def test_voice_transcripts_and_image_summaries_go_with_the_messages(db: Database) -> None:
    """What a voice note said and what a photo showed are the conversation too: kept for ever
    by default, gone after message_days like the messages."""

    def fill(conn: Any) -> None:
        for n, age in enumerate((1000, 400, 10)):
            at = T0 - age * DAY
            conn.execute(
                "INSERT INTO transcript_cache (sha256, text, model, created_at) "
                "VALUES (?, 'my PIN is 4711', 'whisper', ?)",
                (f"t{n}", at),
            )
            conn.execute(
                "INSERT INTO vision_cache (sha256, summary, model, created_at) "
                "VALUES (?, 'a bank statement', 'haiku', ?)",
                (f"v{n}", at),
            )

    await db.write(fill)
    assert (await db.read(retention.plan, CFG, T0)).counts["media"] == 0  # kept for ever
    cfg = RetentionConfig(message_days=365, batch_size=10)
    assert (await db.read(retention.plan, cfg, T0)).counts["media"] == 4
    assert await db.write(retention.prune_batch, cfg, "media", T0) == 4
    assert await db.write(retention.prune_batch, cfg, "media", T0) == 0
    left = await db.read(
        lambda c: [
            r[0]
            for r in c.execute(
                "SELECT sha256 FROM transcript_cache UNION ALL "
                "SELECT sha256 FROM vision_cache ORDER BY 1"
            )
        ]
    )
    assert left == ["t2", "v2"]


async def test_the_daily_run_empties_every_workspaces_old_trash(
    db: Database, tmp_path: Path
) -> None:
    """A deleted file is kept trash_days in its workspace's trash; the daily run purges every
    workspace's, not only one where something is deleted again."""
    spaces = Workspaces(
        root=tmp_path / "ws", allowlisted=frozenset({1}), max_bytes=10**6, trash_days=7, chown=None
    )
    for user in (1, 5):
        space = spaces.ensure(user)
        space.write("new.txt", b"recent")
        space.delete("new.txt", T0 - DAY)
        space.write("old.txt", b"secret")  # deleted last, so no later delete purged it
        space.delete("old.txt", T0 - 30 * DAY)
    out = await daily_run(db, CFG, T0, sweeps={"trash": spaces.purge_trash})
    assert out.removed["trash"] == 2
    for root in (tmp_path / "ws", tmp_path / "ws" / "users" / "5"):
        assert [n.split("-", 2)[2] for n in os.listdir(root / TRASH)] == ["new.txt"]


def runs_and_checks(conn: Any, days: int, open_due: int) -> None:
    """A daily schedule and a daily watch, `days` days old: one run and one check a day; the
    occurrence of `open_due` is still sleeping (a run recorded as it started, say)."""
    conn.execute(
        "INSERT INTO schedules (id, user_id, chat_id, action, text, recurrence, timezone, "
        "catch_up, state, created_at, updated_at, created_by) VALUES ('s1', 1, 1, 'message', "
        "'hi', '{}', 'UTC', 'skip', 'active', ?, ?, 'test')",
        (T0 - days * DAY, T0),
    )
    conn.execute(
        "INSERT INTO watches (id, user_id, chat_id, chat_kind, label, source, condition, "
        "recurrence, catch_up, state, created_at, updated_at, created_by) VALUES ('w1', 1, 1, "
        "'private', 'w', '{}', 'c', '{}', 'skip', 'active', ?, ?, 'test')",
        (T0 - days * DAY, T0),
    )
    for n in range(days):
        due = int(T0 - (days - n) * DAY)
        outcome = "baseline" if n == 0 else "unchanged"
        conn.execute(
            "INSERT INTO watch_checks (watch_id, due, outcome, tokens, at) "
            "VALUES ('w1', ?, ?, 9, ?)",
            (due, outcome, due + 5),
        )
        conn.execute(
            "INSERT INTO schedule_runs (schedule_id, due, outcome, at, instance_id) "
            "VALUES ('s1', ?, 'sent', ?, ?)",
            (due, due + 5, f"sched-s1-{due}"),
        )
    for iid in (f"sched-s1-{open_due}", f"sched-w1-{open_due}"):
        store.insert_instance(
            conn, instance_id=iid, workflow="occurrence", key=iid, input_json="{}", now=open_due
        )
        store.set_status(conn, iid, "sleeping", open_due)


async def test_watch_checks_and_schedule_runs_go_with_the_journals(db: Database) -> None:
    """Old checks and runs go after workflow_days; the newest 50 of each, an open occurrence's
    row and a watch's first check (the forecast's one-off baseline) stay at any age."""
    days = 400
    open_due = int(T0 - 300 * DAY)
    await db.write(runs_and_checks, days, open_due)
    planned = await db.read(retention.plan, CFG, T0)
    # One a day for 400 days: the 30 younger than workflow_days are among the newest 50.
    assert planned.counts["schedule_runs"] == days - 50 - 1
    assert planned.counts["watch_checks"] == days - 50 - 1 - 1
    for part in ("watch_checks", "schedule_runs"):
        while await db.write(retention.prune_batch, CFG, part, T0):
            pass

    def left(conn: Any, table: str) -> list[int]:
        return [int(r[0]) for r in conn.execute(f"SELECT due FROM {table} ORDER BY due")]

    newest = [int(T0 - (days - n) * DAY) for n in range(days - 50, days)]
    assert await db.read(left, "schedule_runs") == [open_due, *newest]
    assert await db.read(left, "watch_checks") == [int(T0 - days * DAY), open_due, *newest]
    assert (await db.read(retention.plan, CFG, T0)).total == 0
    kept_for_ever = RetentionConfig(workflow_days=0)
    assert (await db.read(retention.plan, kept_for_ever, T0)).total == 0


async def test_vacuum_waits_for_free_space_and_for_a_backup(tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "v.db")
    try:
        await db.write(
            lambda c: c.executemany(
                "INSERT INTO audit (at, kind, detail) VALUES (?, 'turn', ?)",
                [(T0 - 400 * DAY, "x" * 2000) for _ in range(500)],
            )
        )
        cfg = RetentionConfig(vacuum_free_ratio=0.3)
        assert "free" in (await db.read(retention.vacuum_due, cfg, T0) or "")
        while await db.write(retention.prune_batch, RetentionConfig(batch_size=1000), "audit", T0):
            pass
        assert await db.read(retention.vacuum_due, cfg, T0) is None
        await db.write(retention.mark_backup, True)
        now = __import__("time").time()
        assert await db.read(retention.vacuum_due, cfg, now) == "a backup is running"
        later = now + retention.BACKUP_STALE_SECONDS + 1  # a backup that died long ago
        assert await db.read(retention.vacuum_due, cfg, later) is None
    finally:
        await db.close()


async def test_the_daily_workflow_prunes_once_per_day(db: Database) -> None:
    """Through the engine with a fake clock; a far-off reminder sleeping since long ago stays."""

    @workflow("sleeper")
    async def sleeper(step: Step, inp: PruneInput) -> PruneInput:
        await step.sleep_until("far-off", T0 + 1000 * DAY)
        return inp

    def fill(conn: Any) -> None:
        journal(conn, "old-done", T0 - 40 * DAY, "complete", 1)
        store.insert_instance(
            conn,
            instance_id="reminder",
            workflow="sleeper",
            key="sleeper",
            input_json='{"day": "x"}',
            now=T0 - 90 * DAY,
        )
        conn.execute(
            "INSERT INTO updates (update_id, received_at, kind, outcome, instance_id) "
            "VALUES (9, ?, 'message', 'turn', 'reminder')",
            (T0 - 90 * DAY,),
        )
        for n in range(25):
            audit.record(conn, "turn", chat_id=1, at=T0 - 400 * DAY + n)

    await db.write(fill)
    clock = FakeClock(start=T0)
    engine = Engine(db, clock=clock, poll_interval=0.02)
    engine.register(make_retention_workflow(db, CFG, clock, tables=TABLES))
    engine.register(sleeper)
    await engine.run()
    try:
        iid = instance_id(T0)
        first = await engine.start(
            RETENTION_WORKFLOW, PruneInput(day=iid[10:]), instance_id=iid, key=RETENTION_WORKFLOW
        )
        again = await engine.start(
            RETENTION_WORKFLOW, PruneInput(day=iid[10:]), instance_id=iid, key=RETENTION_WORKFLOW
        )
        assert first.created and not again.created
        done = await engine.wait_for(iid, timeout=30)
        assert done.status == "complete", done.error
        out = PruneOutput.model_validate_json(done.output or "{}")
        assert out.removed == {
            "workflows": 1,
            "audit": 25,
            "usage": 0,
            "messages": 0,
            "media": 0,
            "watch_checks": 0,
            "schedule_runs": 0,
            "updates": 1,
            "matrix_events": 0,
            "matrix_ids": 0,
            "matrix_buttons": 0,
            "matrix_early_reactions": 0,
            "matrix_drafts": 0,
            "webchat_messages": 0,
        }
        # Batches of 10: the 25 audit rows took three journaled steps and an empty fourth.
        steps = await db.read(store.load_steps, iid)
        assert [s.name for s in steps.values() if s.name.startswith("prune:audit")] == [
            "prune:audit#1",
            "prune:audit#2",
            "prune:audit#3",
            "prune:audit#4",
        ]
        # What came after runs were journaled comes after the vacuum step, so a run an older
        # agentd left unfinished replays as it was journaled.
        names = [s.name for _, s in sorted(steps.items())]
        assert names.index("vacuum") < names.index("prune:media#1")
        assert names.index("prune:media#1") < names.index("prune:updates#1")
        reminder = await db.read(store.get_instance, "reminder")
        assert reminder.status == "sleeping"
        assert await db.read(lambda c: rows(c, "SELECT COUNT(*) FROM updates")) == 1
        assert instance_id(T0 + DAY) != iid
    finally:
        await engine.shutdown(1)


def test_agentd_prune_dry_run_then_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import time

    from typer.testing import CliRunner

    from agentd.channels import migrations
    from agentd.cli.app import app
    from agentd.db import open_sync
    from agentd.db.migrations import apply_migrations

    conn = open_sync(tmp_path / "agentd.db")
    apply_migrations(conn, migrations())  # as the daemon leaves it: the channels' tables too
    now = time.time()
    journal(conn, "old-done", now - 40 * DAY, "complete", 1)
    journal(conn, "old-waiting", now - 40 * DAY, "waiting", 2)
    conn.close()
    config = tmp_path / "agentd.toml"
    config.write_text(f'[storage]\npath = "{tmp_path / "agentd.db"}"\n')
    monkeypatch.setenv("AGENTD_CONFIG", str(config))
    runner = CliRunner()

    dry = runner.invoke(app, ["prune", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["would_remove"]["workflows"] == 1
    real = runner.invoke(app, ["prune", "--json"])
    assert json.loads(real.output)["removed"] == {
        "workflows": 1,
        "audit": 0,
        "usage": 0,
        "messages": 0,
        "media": 0,
        "watch_checks": 0,
        "schedule_runs": 0,
        "updates": 1,
        "matrix_events": 0,
        "matrix_ids": 0,
        "matrix_buttons": 0,
        "matrix_early_reactions": 0,
        "matrix_drafts": 0,
        "webchat_messages": 0,
    }
    table = runner.invoke(app, ["prune", "--dry-run"], env={"COLUMNS": "80"})
    assert "workflows" in table.output and "for ever" in table.output  # messages are kept


async def test_a_run_journaled_when_update_records_were_a_core_part_replays_as_it_was(
    db: Database,
) -> None:
    """Older code pruned Telegram's update records second, right after the journals; a run
    it left unfinished resumes on the path it journaled, and nothing is pruned twice."""
    iid = instance_id(T0)

    def old_journal(conn: Any) -> None:
        journal(conn, "old-done", T0 - 40 * DAY, "complete", 1)
        store.insert_instance(
            conn,
            instance_id=iid,
            workflow=RETENTION_WORKFLOW,
            key=RETENTION_WORKFLOW,
            input_json=PruneInput(day=iid[10:]).model_dump_json(),
            now=T0,
        )
        done = [("now", str(T0)), ("prune:workflows#1", "1"), ("prune:workflows#2", "0")]
        for ordinal, (name, result) in enumerate([*done, ("prune:updates#1", "1")], start=1):
            store.begin_step(conn, iid, ordinal, name, "do", T0, attempt=1)
            store.finish_step(conn, iid, ordinal, T0, status="complete", result=result)
        conn.execute("DELETE FROM workflow_instances WHERE id = 'old-done'")
        conn.execute("DELETE FROM updates")  # what the journaled steps removed

    await db.write(old_journal)
    clock = FakeClock(start=T0)
    engine = Engine(db, clock=clock, poll_interval=0.02)
    engine.register(make_retention_workflow(db, CFG, clock, tables=TABLES))
    await engine.run()
    try:
        done = await engine.wait_for(iid, timeout=30)
    finally:
        await engine.shutdown(grace=0.2)
    assert done.status == "complete", done.error
    removed = PruneOutput.model_validate_json(done.output or "{}").removed
    assert removed["workflows"] == 1 and removed["updates"] == 1
    steps = await db.read(store.load_steps, iid)
    names = [s.name for _, s in sorted(steps.items())]
    assert names[:5] == [
        "now",
        "prune:workflows#1",
        "prune:workflows#2",
        "prune:updates#1",
        "prune:updates#2",
    ]
    assert names.count("prune:updates#1") == 1 and "prune:matrix_events#1" in names
