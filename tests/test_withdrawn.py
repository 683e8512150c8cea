"""Withdrawn requests and edits at the database level (docs/messages.md, "Stopping and
editing"): what the prompt, the summariser and intake's edit rule see. The end-to-end proofs are in
tests/test_e2e_stop_edit.py; these pin each rule down case by case."""

from __future__ import annotations

import time
from typing import Any

from agentd.agent.edits import plan_edit
from agentd.chat.inputs import TurnInput
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.durable import store
from agentd.memory import history
from agentd.memory.summarise import WITHDRAWN, SummaryInput, _block

CHAT = 7


def say(conn: Any, role: str, text: str, iid: str, tg_id: int = 0) -> int:
    return history.save_message(
        conn,
        chat_id=CHAT,
        user_id=CHAT if role == "user" else None,
        role=role,
        content=text,
        source_key=f"{iid}:{role}",
        instance_id=iid,
        meta={"telegram_message_id": tg_id} if tg_id else {},
    )


def turn(message_id: int, text: str, **extra: Any) -> TurnInput:
    return TurnInput(
        update_id=message_id,
        chat_id=CHAT,
        chat_kind="private",
        user_id=CHAT,
        message_id=message_id,
        date=time.time(),
        kind="text",
        text=text,
        **extra,
    )


def start(conn: Any, iid: str, inp: TurnInput, status: str = "queued") -> None:
    store.insert_instance(
        conn,
        instance_id=iid,
        workflow=TURN_WORKFLOW,
        key=chat_key(CHAT),
        input_json=inp.model_dump_json(),
        now=time.time(),
    )
    if status != "queued":
        store.set_status(conn, iid, status, time.time())


def test_a_withdrawn_request_leaves_the_prompt_and_the_summary(conn: Any) -> None:
    say(conn, "user", "delete everything", "t1")
    say(conn, "user", "what's the weather?", "t2")
    last = say(conn, "assistant", "Sunny.", "t2")
    assert history.withdraw(conn, ["t1"], "stopped") == 1
    assert history.withdraw(conn, ["t1"], "stopped") == 0  # once
    assert history.turns_between(conn, CHAT, 0, last + 1) == [
        ("user", "what's the weather?"),
        ("assistant", "Sunny."),
    ]
    block = _block(conn, SummaryInput(chat_id=CHAT, user_id=CHAT, up_to_id=last), 0, 0)
    assert [m.content for m in block] == [WITHDRAWN, "what's the weather?", "Sunny."]
    assert "delete everything" in [m.content for m in history.history(conn, chat_id=CHAT)]


def test_an_unchanged_edit_plans_nothing(conn: Any) -> None:
    start(conn, "t1", turn(11, "hello"), "complete")
    say(conn, "user", "hello", "t1", tg_id=11)
    plan = plan_edit(conn, turn(11, "hello", edited=True), time.time())
    assert (plan.action, plan.turn) == ("unchanged", None)


def test_an_edit_of_a_queued_turn_replaces_it(conn: Any) -> None:
    start(conn, "t1", turn(11, "book for four"))
    plan = plan_edit(conn, turn(11, "book for five", edited=True), time.time())
    assert plan.action == "replace" and plan.turn is not None and plan.turn.replaces == "t1"
    assert store.get_instance(conn, "t1").status == "cancelled"


def test_an_edit_of_a_turn_sending_its_answer_is_a_correction(conn: Any) -> None:
    start(conn, "t1", turn(11, "meet at 5"), "running")
    say(conn, "user", "meet at 5", "t1", tg_id=11)
    store.begin_step(conn, "t1", 1, "send#1", "do", time.time())  # the answer is on its way
    plan = plan_edit(conn, turn(11, "meet at 6", edited=True), time.time())
    assert plan.action == "correct" and plan.turn is not None
    assert plan.turn.corrects == "meet at 5"
    assert store.get_instance(conn, "t1").status == "running"  # not cancelled


def test_an_edit_of_an_unknown_message_is_an_ordinary_edited_turn(conn: Any) -> None:
    plan = plan_edit(conn, turn(99, "typo fixed", edited=True), time.time())
    assert plan.action == "new" and plan.turn is not None and plan.turn.corrects is None
