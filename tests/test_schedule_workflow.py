"""The occurrence workflow on the real engine with a FakeClock: exactly once, catch-up, cancel.

The outbox is an in-process recorder (a unit double); tests/test_e2e_schedule.py drives the real
Telegram client against the fake Bot API.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentd.config import Config
from agentd.db import Database
from agentd.durable import Engine, FakeClock, store
from agentd.schedule import store as sched_store
from agentd.schedule.create import ScheduleRequest, create, timing
from agentd.schedule.recurrence import ScheduleError
from agentd.schedule.workflow import ScheduleDeps, decide, make_schedule_workflow

START = 1_800_000_000.0  # 2027-01-15 08:00 UTC
HOUR = 3600


class RecordingOutbox:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str, float]] = []
        self.clock: FakeClock | None = None

    def split(self, markdown: str) -> list[str]:
        return [markdown] if markdown.strip() else []  # no length limit here

    async def send_text(self, chat_id: int, markdown: str, **_: Any) -> int:
        self.sent.append((chat_id, markdown, self.clock.now() if self.clock else 0.0))
        return len(self.sent)


class Rig:
    def __init__(self, db: Database, clock: FakeClock, config: Config) -> None:
        self.db, self.clock, self.config = db, clock, config
        self.outbox = RecordingOutbox()
        self.outbox.clock = clock
        self.turns: list[tuple[str, Any]] = []
        self.engine: Engine | None = None

    async def start(self) -> Engine:
        engine = Engine(self.db, clock=self.clock, poll_interval=0.01)

        async def start_workflow(name: str, inp: Any, *, instance_id: str, key: str) -> None:
            self.turns.append((instance_id, inp))

        deps = ScheduleDeps(
            config=self.config,
            db=self.db,
            outbox=self.outbox,
            clock=self.clock,
            start_workflow=start_workflow,
            kick=engine.kick,
        )
        engine.register(make_schedule_workflow(deps))
        await engine.run()
        self.engine = engine
        return engine

    async def stop(self) -> None:
        assert self.engine is not None
        await self.engine.shutdown(1.0)

    async def add(self, sid: str, **fields: Any) -> sched_store.Schedule:
        req = ScheduleRequest(**fields)
        rec = timing(req, now=self.clock.now(), config=self.config.schedule, default_timezone="UTC")
        sched, _ = await self.db.write(
            lambda c: create(
                c,
                req,
                rec,
                schedule_id=sid,
                user_id=7,
                chat_id=7,
                chat_kind="private",
                now=self.clock.now(),
                config=self.config.schedule,
                by="test",
            )
        )
        if self.engine:
            self.engine.kick(sched_store.schedule_key(sid))
        return sched

    async def advance(self, seconds: float, step: float = 60.0) -> None:
        """Move time in small hops; after each, wait until the engine has done all that fell
        due (however slow the machine), so no firing is skipped or moved."""
        await self.settle()
        left = seconds
        while left > 0:
            hop = min(step, left)
            self.clock.advance(hop)
            left -= hop
            await self.settle()

    async def settle(self) -> None:
        assert self.engine is not None
        await self.engine.settled()

    async def until_next_run(self, sid: str, when: float, timeout: float = 5.0) -> None:
        """Wait (in real time) until the schedule's chain has moved on to `when`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (await self.db.read(sched_store.get, sid)).next_run != when:
            assert loop.time() < deadline, f"{sid} never reached its run at {when}"
            await asyncio.sleep(0.01)
        await self.settle()

    async def runs(self, sid: str) -> list[str]:
        found = await self.db.read(sched_store.runs, sid, 1000)
        return [r.outcome for r in reversed(found)]


@asynccontextmanager
async def rig(db: Database, **schedule: Any):  # type: ignore[no-untyped-def]
    # User 7 is served: every run checks (a schedule of someone no longer served is cancelled).
    config = Config.model_validate(
        {"access": {"allowed_user_ids": [7]}, "schedule": {"min_interval": 1, **schedule}}
    )
    r = Rig(db, FakeClock(START), config)
    await r.start()
    try:
        yield r
    finally:
        await r.stop()


async def test_one_off_message_is_sent_once_and_the_schedule_is_done(db: Database) -> None:
    async with rig(db) as r:
        await r.add("a1", message="call Anna", after="20m")
        await r.advance(19 * 60)
        assert r.outbox.sent == []
        await r.advance(120)
        assert [(c, t) for c, t, _ in r.outbox.sent] == [(7, "call Anna")]
        sched = await db.read(sched_store.get, "a1")
        assert sched.state == "done" and await r.runs("a1") == ["sent"]
        [run] = await db.read(sched_store.runs, "a1")
        assert run.detail.startswith("message ")  # the chat may be Telegram's or Matrix's


async def test_a_reminder_cancelled_by_its_button_names_the_chat_not_a_channel(
    db: Database,
) -> None:
    from agentd.chat.inputs import CallbackPress
    from agentd.schedule.reminders import cancel_data, press_cancel

    async with rig(db) as r:
        await r.add("b1", message="stretch", after="20m")
        press = CallbackPress(
            update_id=1,
            callback_id="c",
            user_id=7,
            chat_id=7,
            chat_kind="private",
            data=cancel_data("b1"),
        )
        assert await db.write(press_cancel, press) == "Cancelled b1."
        rows = await db.read(
            lambda c: c.execute(
                "SELECT json_extract(detail, '$.by') FROM audit WHERE kind = 'schedule_cancelled'"
            ).fetchall()
        )
        assert [r[0] for r in rows] == ["chat:7"]


async def test_a_group_sees_only_the_reminders_set_up_there(db: Database) -> None:
    from agentd.chat.command import CommandInput
    from agentd.schedule.reminders import list_reminders

    async with rig(db) as r:
        await r.add("p1", message="pick up the test results", after="20m")

        def asked(chat_id: int) -> CommandInput:
            kind = "private" if chat_id > 0 else "group"
            return CommandInput(name="reminders", chat_id=chat_id, chat_kind=kind, user_id=7)

        private = await list_reminders(db, asked(7))
        group = await list_reminders(db, asked(-1001))
    assert "pick up the test results" in private.text and private.buttons
    assert "test results" not in group.text and not group.buttons
    assert "private chat" in group.text


async def test_recurring_sends_each_occurrence_once_across_restarts(db: Database) -> None:
    async with rig(db) as r:
        await r.add("h1", message="stretch", every="1h")
        await r.advance(HOUR + 1, step=HOUR / 2)
    # Restart twice mid-period: completed occurrences are not repeated, none is skipped.
    for _ in range(2):
        r2 = Rig(db, r.clock, r.config)
        r2.outbox = r.outbox
        await r2.start()
        await r2.advance(HOUR, step=HOUR / 2)
        await r2.stop()
    assert len(r.outbox.sent) == 3
    assert await r.runs("h1") == ["sent", "sent", "sent"]
    late = [t - START - HOUR * n for n, (_, _, t) in enumerate(r.outbox.sent, start=1)]
    assert all(0 <= s <= 1 for s in late)


async def test_a_crash_after_sending_but_before_recording_does_not_send_again(
    db: Database,
) -> None:
    async with rig(db) as r:
        await r.add("c1", message="once only", after="1m")
        await r.advance(61, step=61)
        assert len(r.outbox.sent) == 1
    # Roll the instance back to "running" as a crash between send and record would leave it.
    iid = sched_store.occurrence_id("c1", int(START) + 60)

    def roll_back(conn: Any) -> None:
        conn.execute("DELETE FROM workflow_steps WHERE instance_id = ? AND name = 'record'", (iid,))
        conn.execute("UPDATE workflow_instances SET status = 'running' WHERE id = ?", (iid,))
        conn.execute("DELETE FROM schedule_runs")

    await db.write(roll_back)
    r2 = Rig(db, r.clock, r.config)
    r2.outbox = r.outbox
    await r2.start()
    await r2.advance(5)
    await r2.stop()
    assert len(r.outbox.sent) == 1  # the journaled send step is replayed, not repeated
    assert await r2.runs("c1") == ["sent"]


@pytest.mark.parametrize(
    ("policy", "sent", "outcomes"),
    [
        ("skip", 0, ["missed"] * 5),
        ("once", 1, ["missed"] * 4 + ["sent"]),
        ("all", 5, ["sent"] * 5),
    ],
)
async def test_downtime_over_several_occurrences(
    db: Database, policy: str, sent: int, outcomes: list[str]
) -> None:
    async with rig(db) as r:
        await r.add("d1", message="tick", every="1h", catch_up=policy)
        await r.advance(10)
    # Down for 5h10m: occurrences at +1h … +5h were due while nobody ran.
    r.clock.advance(5 * HOUR + 600)
    r2 = Rig(db, r.clock, r.config)
    r2.outbox = r.outbox
    await r2.start()
    await r2.until_next_run("d1", START + 6 * HOUR)
    await r2.stop()
    assert len(r.outbox.sent) == sent
    assert await r2.runs("d1") == outcomes
    audit = await db.read(
        lambda c: c.execute(
            "SELECT kind, COUNT(*) FROM audit WHERE kind LIKE 'schedule_%' GROUP BY kind"
        ).fetchall()
    )
    assert dict(audit).get("schedule_missed", 0) == outcomes.count("missed")
    nxt = (await db.read(sched_store.get, "d1")).next_run
    assert nxt == START + 6 * HOUR  # the chain goes on from the next future occurrence


async def test_once_policy_drops_a_run_that_is_too_late(db: Database) -> None:
    async with rig(db, max_grace=HOUR) as r:
        await r.add("o1", message="call", after="10m", catch_up="once")
    r.clock.advance(3 * HOUR)  # a one-off's grace is max_grace: 1 h
    r2 = Rig(db, r.clock, r.config)
    await r2.start()
    await r2.advance(1)
    await r2.stop()
    assert r2.outbox.sent == [] and await r2.runs("o1") == ["missed"]


async def test_cancel_while_sleeping_stops_the_occurrence(db: Database) -> None:
    async with rig(db) as r:
        await r.add("x1", message="never", every="1h")
        await r.advance(60)
        iid = sched_store.occurrence_id("x1", int(START) + HOUR)
        assert (await db.read(store.get_instance, iid)).status == "sleeping"

        def cancel(conn: Any) -> None:  # what `agentd schedule cancel` does, from its own process
            sched = sched_store.get(conn, "x1")
            sched_store.set_state(conn, sched, "cancelled", r.clock.now(), by="cli")

        await db.write(cancel)
        assert r.engine is not None
        await r.engine.poll_once()
        await r.settle()
        assert (await db.read(store.get_instance, iid)).status == "cancelled"
        await r.advance(3 * HOUR, step=HOUR)
        assert r.outbox.sent == []


async def test_pause_and_resume_restart_from_the_next_occurrence(db: Database) -> None:
    async with rig(db) as r:
        await r.add("p1", message="ping", every="1h")
        await db.write(
            lambda c: sched_store.set_state(
                c, sched_store.get(c, "p1"), "paused", r.clock.now(), by="cli"
            )
        )
        assert r.engine is not None
        await r.engine.poll_once()
        await r.advance(2 * HOUR + 60, step=HOUR / 2)
        assert r.outbox.sent == []
        await db.write(
            lambda c: sched_store.set_state(
                c, sched_store.get(c, "p1"), "active", r.clock.now(), by="cli"
            )
        )
        await r.engine.poll_once()
        await r.advance(HOUR, step=HOUR / 2)
        assert len(r.outbox.sent) == 1 and await r.runs("p1") == ["sent"]


async def test_pause_and_resume_before_the_due_time_still_runs_it(db: Database) -> None:
    async with rig(db) as r:
        await r.add("p2", message="ping", every="1h")
        assert r.engine is not None
        for state in ("paused", "active"):  # both before the first run is due
            await db.write(
                lambda c, s=state: sched_store.set_state(
                    c, sched_store.get(c, "p2"), s, r.clock.now(), by="cli"
                )
            )
            await r.engine.poll_once()
            await r.settle()
        await r.advance(HOUR + 60, step=HOUR / 4)
        assert len(r.outbox.sent) == 1 and await r.runs("p2") == ["sent"]


async def test_daily_at_0800_berlin_fires_at_0800_local_across_dst(db: Database) -> None:
    berlin = ZoneInfo("Europe/Berlin")
    start = datetime(2026, 3, 27, 12, 0, tzinfo=berlin).timestamp()
    config = Config.model_validate(
        {"access": {"allowed_user_ids": [7]}, "schedule": {"min_interval": 1}}
    )
    r = Rig(db, FakeClock(start), config)
    await r.start()
    try:
        await r.add(
            "dst",
            message="coffee",
            rrule="FREQ=DAILY;BYHOUR=8;BYMINUTE=0",
            timezone="Europe/Berlin",
        )
        await r.advance(4 * 86400, step=HOUR)
    finally:
        await r.stop()
    fired = [datetime.fromtimestamp(t, berlin).strftime("%d %H:%M %Z") for _, _, t in r.outbox.sent]
    assert fired == ["28 08:00 CET", "29 08:00 CEST", "30 08:00 CEST", "31 08:00 CEST"]


async def test_prompt_schedule_starts_a_turn_for_the_owner(db: Database) -> None:
    async with rig(db) as r:
        await r.add("t1", prompt="summarise my day", after="1m")
        await r.advance(61)
        [(iid, turn)] = r.turns
        assert iid == sched_store.occurrence_id("t1", int(START) + 60) + "-turn"
        assert (turn.chat_id, turn.user_id, turn.text, turn.schedule_id) == (
            7,
            7,
            "summarise my day",
            "t1",
        )
        assert turn.origin == "schedule" and (turn.update_id, turn.message_id) == (None, None)
        assert r.outbox.sent == [] and await r.runs("t1") == ["started"]


async def test_caps_refuse_runaway_schedules(db: Database) -> None:
    async with rig(db, max_active_per_user=2, min_interval=300) as r:
        with pytest.raises(ScheduleError, match="minimum is 5m"):
            await r.add("m1", message="spam", every="1m")
        with pytest.raises(ScheduleError, match="minimum is 5m"):
            await r.add("m2", message="spam", rrule="FREQ=MINUTELY")
        await r.add("m3", message="a", every="1h")
        await r.add("m4", message="b", every="1h")
        with pytest.raises(ScheduleError, match="limit is 2"):
            await r.add("m5", message="c", every="1h")


def test_decide_on_time_runs_whatever_the_policy() -> None:
    from agentd.schedule.recurrence import Recurrence

    rec = Recurrence(kind="interval", timezone="UTC", anchor=0, every=HOUR)
    for policy in ("skip", "once", "all"):
        sched = sched_store.Schedule(
            id="s",
            user_id=1,
            chat_id=1,
            chat_kind="private",
            action="message",
            text="t",
            recurrence=rec,
            timezone="UTC",
            catch_up=policy,
            state="active",
            next_run=HOUR,  # type: ignore[arg-type]
            created_at=0,
            updated_at=0,
            created_by="test",
        )
        plan = decide(sched, HOUR, HOUR + 30, on_time=60, grace=1800)
        assert (plan.action, plan.chain) == ("run", 2 * HOUR)


async def test_a_run_of_someone_no_longer_served_is_refused_and_the_schedule_cancelled(
    db: Database,
) -> None:
    async with rig(db) as r:
        await r.add("gone", message="water the plants", every="1h")
        await r.advance(HOUR + 60)
        assert [t for _, t, _ in r.outbox.sent] == ["water the plants"]
        # User 7 leaves the allowlist (a config edit and a restart; here, the same config).
        r.config.access.allowed_user_ids.clear()
        await r.advance(2 * HOUR)
        assert [t for _, t, _ in r.outbox.sent] == ["water the plants"]  # nothing more
        runs_sql = (
            "SELECT outcome, detail FROM schedule_runs WHERE schedule_id = 'gone' ORDER BY due"
        )
        state, runs = await db.read(
            lambda c: (
                c.execute("SELECT state FROM schedules WHERE id = 'gone'").fetchone()[0],
                [tuple(x) for x in c.execute(runs_sql)],
            )
        )
        assert state == "cancelled"
        assert runs[-1] == ("refused", "the user is no longer served")


async def test_a_rule_that_never_fires_is_refused_without_holding_the_database(
    tmp_path: Any,
) -> None:
    """dateutil searches February 30th to year 9999 (seconds): the search runs in a child with
    a CPU budget, before the transaction, so other writes go on meanwhile and the model is told
    why."""
    from agentd.schedule.tools import schedule_tools
    from agentd.tools import ToolContext
    from agentd.tools.execute import execute

    db = await Database.open(tmp_path / "s.db")
    try:
        tool = next(t for t in schedule_tools(db, Config(), lambda _: None) if t.name == "schedule")
        ctx = ToolContext(chat_id=7, chat_kind="private", user_id=7, instance_id="i")
        args = {"message": "pay rent", "rrule": "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"}
        searching = asyncio.create_task(execute(tool, ctx, args))
        await asyncio.sleep(0)  # one turn of the loop: the call has started
        for n in range(3):
            await db.write(lambda c, n=n: c.execute("SELECT ?", (n,)).fetchone())
        assert not searching.done()
        result = await searching
        # Out of CPU budget, or (a machine fast enough to reach 9999 in 2 s) nothing found.
        said = ("no run of the rule", "has no occurrence after now")
        assert result.is_error and any(words in result.content for words in said), result.content
        count = await db.read(lambda c: c.execute("SELECT count(*) FROM schedules").fetchone())
        assert count[0] == 0
    finally:
        await db.close()
