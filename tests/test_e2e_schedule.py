"""End to end through `agentd run`: reminders fire once, survive kill -9, catch up by policy.

Real durations, seconds apart (the daemon runs on the system clock); the calendar and DST rules
are proven with the FakeClock in test_schedule_recurrence.py and test_schedule_workflow.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentd.chat.names import chat_key
from agentd.schedule.store import schedule_key
from tests.daemon_process import Daemon, daemon_env, poll, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

USERS = list(range(300, 330))
CONFIG = """
[tools]
plugins = ["tests.plugins.e2e_tools"]
approval_timeout = 60

[schedule]
min_interval = 1
on_time_window = 0.5
max_grace = 60
"""


def sched_env(tmp: Path, tg: FakeTelegram, llm: FakeAnthropic) -> dict[str, str]:
    (tmp / "agentd.toml").write_text(CONFIG)
    return daemon_env(
        tmp,
        tg.base_url,
        llm.base_url,
        AGENTD_CONFIG=str(tmp / "agentd.toml"),
        AGENTD_ACCESS__ALLOWED_USER_IDS=str(USERS),
        AGENTD_ACCESS__APPROVERS=str(USERS),
    )  # each approves their own


class Stack:
    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon) -> None:
        self.tg, self.llm, self.daemon = tg, llm, daemon
        self._users = iter(USERS)

    def user(self) -> int:
        """A fresh user who has started the bot (a bot cannot message anyone else)."""
        user = next(self._users)
        self.tg.add_chat(user)
        return user

    def sent(self, chat: int) -> list[dict[str, Any]]:
        return [m for m in self.tg.sent if m["chat_id"] == chat]

    def wait_sent(self, chat: int, n: int, timeout: float = 20) -> list[dict[str, Any]]:
        return self.tg.wait_until(
            lambda: (s := self.sent(chat)) and len(s) >= n and s, timeout, f"{n} messages to {chat}"
        )

    def add(self, user: int, *args: str) -> dict[str, Any]:
        return self.daemon.cli_json("schedule", "add", "--user", str(user), *args)

    def runs(self, schedule_id: str) -> list[str]:
        rows = self.daemon.query(
            "SELECT outcome FROM schedule_runs WHERE schedule_id = ? ORDER BY due", (schedule_id,)
        )
        return [r[0] for r in rows]

    def wait_runs(self, schedule_id: str, n: int, timeout: float = 20) -> list[str]:
        return poll(
            lambda: len(found := self.runs(schedule_id)) >= n and found,
            timeout,
            f"{n} runs of {schedule_id}",
        )

    def instance_status(self, key: str) -> str:
        sql = "SELECT status FROM workflow_instances WHERE key = ?"
        return self.daemon.query(sql, (key,))[0][0]


def script(llm: FakeAnthropic, marker: str, *replies: Any) -> None:
    """Answer requests whose first message carries `marker` with these replies, in order."""
    queue = list(replies)
    previous = llm._responder

    def responder(body: dict[str, Any]) -> Any:
        if marker in str(body["messages"][0]) and queue:
            return queue.pop(0)
        return previous(body) if previous else None

    llm.set_responder(responder)


@contextmanager
def stack_of(tmp: Path) -> Iterator[Stack]:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        with running_daemon(tmp, sched_env(tmp, tg, llm)) as daemon:
            yield Stack(tg, llm, daemon)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of(tmp_path_factory.mktemp("sched")) as s:
        yield s


def test_the_model_schedules_a_reminder_from_chat_and_it_fires_once(stack: Stack) -> None:
    user = stack.user()
    args = {"message": "stand up and stretch", "after": "3s"}
    script(
        stack.llm,
        f"u{user}:",
        [{"type": "tool_use", "id": "toolu_s1", "name": "schedule", "input": args}],
        "I'll remind you.",
    )
    stack.tg.add_message(user, user, f"u{user}: remind me in 3 seconds to stand up")
    reply = stack.wait_sent(user, 1)[0]["plain_text"]
    assert "Done on your behalf: schedule" in reply  # medium risk: the reply says what was done
    result = next(
        b
        for r in stack.llm.requests
        if f"u{user}:" in str(r["body"]["messages"][0])
        for m in r["body"]["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )
    assert "Scheduled" in str(result["content"]) and "next" in str(result["content"])
    reminder = stack.wait_sent(user, 2)[1]
    assert reminder["plain_text"] == "stand up and stretch"
    [sched] = stack.daemon.cli_json("schedule", "ls", "--all", "--user", str(user))
    assert stack.wait_runs(sched["id"], 1) == ["sent"]
    # The occurrence's workflow is over (it records its run after the send) and, a one-off,
    # started no other: nothing is left that could deliver it again.
    stack.daemon.wait_idle(schedule_key(sched["id"]))
    assert len(stack.sent(user)) == 2  # exactly one delivery
    shown = stack.daemon.cli_json("schedule", "show", sched["id"])
    assert shown["state"] == "done" and shown["runs"][0]["outcome"] == "sent"


def test_reminders_command_lists_and_its_button_cancels(stack: Stack) -> None:
    user = stack.user()
    sched = stack.add(user, "--message", "water the plants", "--every", "1h")
    requests_before = len(stack.llm.requests)
    stack.tg.add_message(user, user, "/reminders")
    listing = stack.wait_sent(user, 1)[0]
    assert sched["id"] in listing["plain_text"] and "water the plants" in listing["plain_text"]
    [[button]] = listing["reply_markup"]["inline_keyboard"]
    assert button["callback_data"] == f"sc:{sched['id']}:x"
    assert len(stack.llm.requests) == requests_before  # commands never reach the model
    # Another allowed user cannot cancel it; the owner can, once.
    other = stack.user()
    stack.tg.add_callback_query(other, user, listing["message_id"], button["callback_data"])
    press = stack.tg.add_callback_query(user, user, listing["message_id"], button["callback_data"])
    answer = stack.tg.wait_until(
        lambda: next(
            (
                a
                for a in stack.tg.callback_answers
                if a["callback_query_id"] == stack.tg.callback_query_id(press)
            ),
            None,
        ),
        10,
        "the Cancel answer",
    )
    assert answer["text"] == f"Cancelled {sched['id']}."
    texts = [a["text"] for a in stack.tg.callback_answers]
    assert "That reminder does not exist (or is not yours)." in texts
    key = schedule_key(sched["id"])
    poll(lambda: stack.instance_status(key) == "cancelled", 3, "the occurrence cancelled")


def test_cli_cancel_while_sleeping_takes_effect(stack: Stack) -> None:
    user = stack.user()
    sched = stack.add(user, "--message", "never sent", "--after", "30s")
    out = stack.daemon.cli_json("schedule", "cancel", sched["id"])
    assert out["state"] == "cancelled"
    key = schedule_key(sched["id"])
    # The daemon notices the cancel within a second or two.
    poll(lambda: stack.instance_status(key) == "cancelled", 2.0, "the cancel to reach it")
    # The occurrence's workflow is over: nothing is left that could send it.
    assert stack.sent(user) == [] and stack.runs(sched["id"]) == []


def test_bad_schedules_get_a_clear_error(stack: Stack) -> None:
    user = stack.user()
    past = stack.daemon.cli(
        "schedule", "add", "--user", str(user), "--message", "x", "--at", "2020-01-01T09:00"
    )
    assert past.returncode == 1 and "in the past" in past.stderr
    fast = stack.daemon.cli(
        "schedule", "add", "--user", str(user), "--message", "x", "--every", "0.5s"
    )
    assert fast.returncode == 1 and "positive interval" in fast.stderr


def test_prompt_schedule_runs_a_turn_and_a_high_risk_tool_waits_for_approval(
    stack: Stack,
) -> None:
    user = stack.user()
    script(
        stack.llm,
        f"u{user}:",
        [
            {
                "type": "tool_use",
                "id": "toolu_p1",
                "name": "delete_file",
                "input": {"path": "/tmp/sched-old"},
            }
        ],
        "Deleted the old file.",
    )
    sched = stack.add(user, "--prompt", f"u{user}: delete /tmp/sched-old", "--after", "2s")
    request = stack.tg.wait_until(
        lambda: next((m for m in stack.sent(user) if m["reply_markup"]), None), 20, "approval"
    )
    assert "delete_file" in request["plain_text"]
    # The run's turn is parked on the approval: what it did before asking is all it did.
    poll(lambda: stack.instance_status(chat_key(user)) == "waiting", 20, "the turn to wait")
    assert "delete_file /tmp/sched-old" not in stack.daemon.effects()  # waits for consent
    approve = request["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    stack.tg.add_callback_query(user, user, request["message_id"], approve)
    assert stack.wait_sent(user, 2)[1]["plain_text"] == "Deleted the old file."
    assert stack.daemon.effects().count("delete_file /tmp/sched-old") == 1
    assert stack.runs(sched["id"]) == ["started"]
    run = poll(
        lambda: (
            (r := stack.daemon.cli_json("schedule", "show", sched["id"])["runs"][0])["turn_status"]
            == "complete"
            and r
        ),
        10,
        "the run's turn to complete",
    )
    assert run["instance_id"].endswith("-turn")
    used = stack.daemon.query("SELECT COUNT(*) FROM llm_usage WHERE chat_id = ?", (user,))[0][0]
    assert used == 2  # the run's model calls count against this chat's budget
    first = next(r for r in stack.llm.requests if f"u{user}:" in str(r["body"]["messages"][0]))
    assert "Scheduled task" in str(first["body"]["messages"][0])


def test_a_second_runner_cannot_fire_occurrences(stack: Stack) -> None:
    user = stack.user()
    sched = stack.add(user, "--message", "just once", "--after", "2s")
    second = stack.daemon.cli("run")
    assert second.returncode == 3 and "already running" in second.stderr
    assert stack.wait_runs(sched["id"], 1) == ["sent"]
    stack.daemon.wait_idle(schedule_key(sched["id"]))  # the one-off's workflow is over
    assert [m["plain_text"] for m in stack.sent(user)] == ["just once"]


# -- kill -9 and downtime: a daemon of their own ------------------------------------------


@pytest.fixture(scope="module")
def lonely(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of(tmp_path_factory.mktemp("sched-kill")) as s:
        yield s


def test_kill9_before_during_and_after_an_occurrence_delivers_once(lonely: Stack) -> None:
    s = lonely
    before, during, after = s.user(), s.user(), s.user()
    s.add(after, "--message", "after", "--after", "1s")
    s.wait_sent(after, 1)
    s.llm.hold()  # the prompt run's model call will be in flight when the process dies
    s.add(during, "--prompt", f"u{during}: say hi", "--after", "1s")
    script(s.llm, f"u{during}:", "hi there")
    s.add(before, "--message", "before", "--after", "6s")
    s.llm.wait_for_held(1, timeout=20)
    s.daemon.kill9()
    s.llm.release()
    s.daemon.start()
    s.wait_sent(during, 1)
    s.wait_sent(before, 1, timeout=30)
    # Every occurrence's workflow and the prompt's turn are over: nothing left could send.
    s.daemon.wait_idle()
    assert [m["plain_text"] for m in s.sent(after)] == ["after"]
    assert [m["plain_text"] for m in s.sent(during)] == ["hi there"]
    assert [m["plain_text"] for m in s.sent(before)] == ["before"]


RULE = "FREQ=SECONDLY;INTERVAL=2;COUNT=3"


def test_downtime_over_several_occurrences_follows_each_policy(lonely: Stack) -> None:
    s = lonely
    users = {policy: s.user() for policy in ("skip", "once", "all")}
    s.daemon.kill9()
    # Created while the daemon is down (as `agentd schedule add` does): three runs, 2 s apart.
    now = time.time()
    ids = {policy: add_direct(s.daemon, user, policy, RULE, now) for policy, user in users.items()}
    # Real time must pass with the daemon down (it runs on the system clock): every run falls
    # due while it is not running. What is tested, not a wait for an event.
    time.sleep(max(0.0, now + 2 + 4 + 1.5 - time.time()))
    s.daemon.start()
    assert s.wait_runs(ids["skip"], 3) == ["missed"] * 3
    assert s.wait_runs(ids["once"], 3) == ["missed", "missed", "sent"]
    assert s.wait_runs(ids["all"], 3) == ["sent"] * 3
    s.daemon.wait_idle()  # the last (third) runs were recorded after their sends; none chain
    assert [len(s.sent(u)) for u in users.values()] == [0, 1, 3]
    listed = s.daemon.cli_json("schedule", "show", ids["skip"])
    assert [r["outcome"] for r in listed["runs"]] == ["missed"] * 3
    missed = s.daemon.query("SELECT COUNT(*) FROM audit WHERE kind = 'schedule_missed'")[0][0]
    assert missed == 5


def add_direct(daemon: Daemon, user: int, policy: str, rule: str, now: float) -> str:
    """What `agentd schedule add` does, without its start-up time (the runs are seconds away)."""
    from agentd.config import ScheduleConfig
    from agentd.db import open_sync
    from agentd.schedule.create import ScheduleRequest, create, timing

    start = datetime.fromtimestamp(int(now) + 2, UTC).replace(tzinfo=None).isoformat()
    req = ScheduleRequest(message=policy, rrule=rule, start=start, timezone="UTC", catch_up=policy)  # type: ignore[arg-type]
    conn = open_sync(daemon.db_path)
    try:
        with conn:
            config = ScheduleConfig(min_interval=1)
            create(
                conn,
                req,
                timing(req, now=now, config=config, default_timezone="UTC"),
                schedule_id=f"down{policy}",
                user_id=user,
                chat_id=user,
                chat_kind="private",
                now=now,
                config=config,
                by="test",
            )
    finally:
        conn.close()
    return f"down{policy}"
