"""Which journal writes are synced, which are folded, and what a crash between them leaves."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentd.db import Database, open_sync
from agentd.durable import Engine, FakeClock, LocalStep, Step, StepFailed, store, workflow


class In(BaseModel):
    n: int = 0


class Out(BaseModel):
    value: object = None


class CountingDatabase(Database):
    """Counts synced and unsynced transactions; everything else is the real Database."""

    synced = 0
    unsynced = 0

    async def write(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.synced += 1
        return await super().write(fn, *args, **kwargs)

    async def write_unsynced(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.unsynced += 1
        return await super().write_unsynced(fn, *args, **kwargs)


@pytest.fixture
async def cdb(tmp_path: Path) -> Any:
    opened = await Database.open(tmp_path / "journal.db")
    counting = CountingDatabase(opened._conn, opened.path)
    yield counting
    await counting.close()


async def make_engine(db: Database, *workflows: Any) -> Engine:
    engine = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    for wf in workflows:
        engine.register(wf)
    await engine.run()
    return engine


def insert_note(conn: Any, text: str) -> int:
    return conn.execute("INSERT INTO notes (text) VALUES (?)", (text,)).lastrowid


async def make_notes_table(db: Database) -> None:
    await db.write(lambda c: c.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)"))


async def test_a_turn_shaped_workflow_syncs_only_around_its_external_effects(
    cdb: CountingDatabase,
) -> None:
    await make_notes_table(cdb)
    calls: Counter[str] = Counter()

    async def effect(name: str) -> str:
        calls[name] += 1
        return name

    @workflow("turnish")
    async def turnish(step: Step, inp: In) -> Out:
        note = await step.local("save-user", insert_note, "hello")
        await step.do("rate-check", effect, "rate", delivery="idempotent")
        await step.do("load-history", effect, "history", delivery="idempotent")
        await step.do("llm#1", effect, "llm")
        await step.do("tool", effect, "tool", delivery="at_most_once")
        await step.local("save-reply", insert_note, "answer")
        await step.local("audit", insert_note, "audit")
        return Out(value=note)

    engine = await make_engine(cdb, turnish)
    synced_before, unsynced_before = cdb.synced, cdb.unsynced
    await engine.start("turnish", In(), instance_id="t")
    inst = await engine.wait_for("t")
    assert inst.status == "complete"
    # start + llm#1's result + the at-most-once attempt and its result: 4 fsyncs in all.
    assert cdb.synced - synced_before == 4
    # mark running, three local steps, finish; the idempotent rows rode along, no commit of
    # their own.
    assert cdb.unsynced - unsynced_before == 5
    steps = await cdb.read(store.load_steps, "t")
    assert [(s.name, s.status, s.delivery) for s in steps.values()] == [
        ("save-user", "complete", "local"),
        ("rate-check", "complete", "idempotent"),
        ("load-history", "complete", "idempotent"),
        ("llm#1", "complete", "at_least_once"),
        ("tool", "complete", "at_most_once"),
        ("save-reply", "complete", "local"),
        ("audit", "complete", "local"),
    ]
    attempts = await cdb.read(store.load_attempts, "t")
    assert [(a.ordinal, a.attempt, a.outcome) for a in attempts] == [
        (n, 1, "complete") for n in range(1, 8)
    ]
    notes = await cdb.fetchall("SELECT text FROM notes ORDER BY id")
    assert [r[0] for r in notes] == ["hello", "answer", "audit"]
    await engine.shutdown()


async def test_a_crash_between_folded_writes_reruns_only_what_was_not_committed(
    cdb: CountingDatabase,
) -> None:
    await make_notes_table(cdb)
    calls: Counter[str] = Counter()
    gate = asyncio.Event()

    async def read(name: str) -> str:
        calls[name] += 1
        return name

    async def call() -> str:
        calls["call"] += 1
        await gate.wait()
        return "called"

    def save(conn: Any, text: str) -> int:
        calls["save"] += 1
        return insert_note(conn, text)

    @workflow("folded")
    async def folded(step: Step, inp: In) -> Out:
        await step.local("save", save, "user message")
        await step.do("read-a", read, "a", delivery="idempotent")
        await step.do("read-b", read, "b", delivery="idempotent")
        return Out(value=await step.do("call", call))

    engine = await make_engine(cdb, folded)
    await engine.start("folded", In(), instance_id="f")
    while calls["call"] == 0:
        await asyncio.sleep(0.005)
    # The crash: the local step committed; the idempotent rows were still held for the call's
    # result commit, and the call has no row yet.
    await engine.shutdown(grace=0)
    steps = await cdb.read(store.load_steps, "f")
    assert [s.name for s in steps.values()] == ["save"]

    gate.set()
    engine2 = await make_engine(cdb, folded)
    inst = await engine2.wait_for("f")
    assert inst.status == "complete" and Out.model_validate_json(inst.output).value == "called"
    assert calls == {"save": 1, "a": 2, "b": 2, "call": 2}
    notes = await cdb.fetchall("SELECT text FROM notes")
    assert [r[0] for r in notes] == ["user message"]  # saved once, not twice
    steps = await cdb.read(store.load_steps, "f")
    assert [(s.name, s.status) for s in steps.values()] == [
        ("save", "complete"),
        ("read-a", "complete"),
        ("read-b", "complete"),
        ("call", "complete"),
    ]
    await engine2.shutdown()


async def test_held_rows_reach_the_journal_with_the_final_status(cdb: CountingDatabase) -> None:
    async def value() -> int:
        return 7

    @workflow("tail")
    async def tail(step: Step, inp: In) -> Out:
        return Out(value=await step.do("last", value, delivery="idempotent"))

    engine = await make_engine(cdb, tail)
    await engine.start("tail", In(), instance_id="t")
    assert (await engine.wait_for("t")).status == "complete"
    steps = await cdb.read(store.load_steps, "t")
    assert [(s.name, s.result) for s in steps.values()] == [("last", "7")]
    await engine.shutdown()


async def test_a_failing_local_step_rolls_its_effect_back(cdb: CountingDatabase) -> None:
    await make_notes_table(cdb)

    def half_done(conn: Any) -> int:
        insert_note(conn, "half")
        raise ValueError("constraint the caller did not expect")

    @workflow("rollback")
    async def rollback(step: Step, inp: In) -> Out:
        await step.do("before", _one, delivery="idempotent")
        try:
            await step.local("write", half_done)
        except StepFailed as exc:
            return Out(value=exc.error_type)
        return Out(value="no error")

    engine = await make_engine(cdb, rollback)
    await engine.start("rollback", In(), instance_id="r")
    inst = await engine.wait_for("r")
    assert Out.model_validate_json(inst.output).value == "ValueError"
    assert await cdb.fetchall("SELECT * FROM notes") == []
    steps = await cdb.read(store.load_steps, "r")
    assert [(s.name, s.status) for s in steps.values()] == [
        ("before", "complete"),  # held, then carried by the failure's own commit
        ("write", "failed"),
    ]
    assert "constraint the caller did not expect" in (steps[2].error or "")
    await engine.shutdown()


async def _one() -> int:
    return 1


async def test_synchronous_level_is_configurable_and_restored(tmp_path: Path) -> None:
    def level(conn: Any) -> int:
        return conn.execute("PRAGMA synchronous").fetchone()[0]

    full = await Database.open(tmp_path / "full.db")
    assert await full.read(level) == 2  # FULL
    assert await full.write_unsynced(level) == 1  # NORMAL inside the unsynced transaction
    assert await full.read(level) == 2
    await full.close()
    normal = await Database.open(tmp_path / "normal.db", synchronous="NORMAL")
    assert await normal.read(level) == 1
    await normal.close()


def test_an_unsynced_commit_survives_kill_9(tmp_path: Path) -> None:
    """The property every unsynced journal write relies on: in WAL mode a commit at
    synchronous=NORMAL is in the OS page cache when COMMIT returns, so a crash of the
    process, short of the machine, keeps it."""
    script = textwrap.dedent(
        """
        import asyncio, os, signal, sys
        from agentd.db import Database, open_sync

        async def main():
            db = await Database.open(sys.argv[1])
            await db.write(lambda c: c.execute("CREATE TABLE t (x INTEGER)"))
            for i in range(50):
                await db.write_unsynced(lambda c, i=i: c.execute("INSERT INTO t VALUES (?)", (i,)))
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
        """
    )
    path = tmp_path / "killed.db"
    proc = subprocess.run([sys.executable, "-c", script, str(path)], timeout=60)
    assert proc.returncode == -9
    conn = open_sync(path)
    try:
        assert tuple(conn.execute("SELECT COUNT(*), SUM(x) FROM t").fetchone()) == (50, 1225)
    finally:
        conn.close()


async def test_local_steps_together_take_one_commit_and_replay_one_by_one(
    cdb: CountingDatabase,
) -> None:
    await make_notes_table(cdb)
    runs: Counter[str] = Counter()

    def save(conn: Any, text: str) -> int:
        runs[text] += 1
        return insert_note(conn, text)

    @workflow("pair")
    async def pair(step: Step, inp: In) -> Out:
        if inp.n:  # an older run journaled the first one alone
            first = await step.local("save-reply", save, "answer")
            (second,) = [await step.local("audit", save, "audit")]
        else:
            first, second = await step.locals(
                LocalStep("save-reply", save, ("answer",)), LocalStep("audit", save, ("audit",))
            )
        return Out(value=[first, second])

    engine = await make_engine(cdb, pair)
    before = cdb.unsynced
    await engine.start("pair", In(), instance_id="p")
    inst = await engine.wait_for("p")
    # mark running, one commit for both steps, finish.
    assert cdb.unsynced - before == 3
    steps = await cdb.read(store.load_steps, "p")
    assert [(s.name, s.status, s.delivery) for s in steps.values()] == [
        ("save-reply", "complete", "local"),
        ("audit", "complete", "local"),
    ]
    # The same journal replays through separate `local` calls, and the reverse: nothing reruns.
    await cdb.write(
        lambda c: c.execute(
            "UPDATE workflow_instances SET status = 'queued', output = NULL, finished_at = NULL, "
            "input = '{\"n\": 1}' WHERE id = 'p'"
        )
    )
    engine.kick("p")
    replayed = await engine.wait_for("p")
    assert (
        Out.model_validate_json(replayed.output).value == Out.model_validate_json(inst.output).value
    )
    assert runs == {"answer": 1, "audit": 1}
    await engine.shutdown()


async def test_local_steps_together_fail_as_one_and_name_the_step_that_raised(
    cdb: CountingDatabase,
) -> None:
    await make_notes_table(cdb)

    def boom(conn: Any) -> None:
        raise ValueError("audit table is gone")

    @workflow("pairfail")
    async def pairfail(step: Step, inp: In) -> Out:
        try:
            await step.locals(
                LocalStep("save-reply", insert_note, ("answer",)), LocalStep("audit", boom)
            )
        except StepFailed as exc:
            return Out(value=[exc.step, exc.error_type])
        return Out()

    engine = await make_engine(cdb, pairfail)
    await engine.start("pairfail", In(), instance_id="pf")
    inst = await engine.wait_for("pf")
    assert Out.model_validate_json(inst.output).value == ["audit", "ValueError"]
    assert await cdb.fetchall("SELECT text FROM notes") == []  # the first one rolled back too
    steps = await cdb.read(store.load_steps, "pf")
    assert [(s.name, s.status) for s in steps.values()] == [("audit", "failed")]
    await engine.shutdown()
