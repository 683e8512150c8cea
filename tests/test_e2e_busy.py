"""End to end: a chat is never blocked by a turn that waits (docs/messages.md, "While
something waits").

A card waits while other messages are answered; the approved call then runs once and its
answer replies to the message that asked; a kill -9 while a card waits and another turn runs
loses nothing and repeats nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon_process import OWNER
from tests.fakes.anthropic import last_user_text
from tests.owner_chat import OwnerChat, owner_chat_running

CONFIG = f"""
[access]
owner_id = {OWNER}
allowed_user_ids = [{OWNER}]

[tools]
plugins = ["tests.plugins.e2e_tools"]
approval_timeout = 600
"""


class Stack(OwnerChat):
    def wait_sent(self, pred: Any, what: str, timeout: float = 60) -> dict[str, Any]:
        return self.tg.wait_until(  # type: ignore[no-any-return]
            lambda: next((m for m in self.sent() if pred(m)), None), timeout, what
        )

    def answer_to(self, message_id: int, what: str) -> dict[str, Any]:
        return self.wait_sent(
            lambda m: m.get("reply_to_message_id") == message_id and not m["reply_markup"], what
        )

    def card(self, marker: str) -> dict[str, Any]:
        return self.wait_sent(
            lambda m: m["reply_markup"] and marker in m["plain_text"], f"the card for {marker}"
        )

    def approve(self, card: dict[str, Any]) -> None:
        data = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        self.tg.add_callback_query(OWNER, OWNER, card["message_id"], data)

    def request_for(self, text: str) -> dict[str, Any]:
        return next(
            r["body"] for r in self.llm.requests if last_user_text(r["body"]).endswith(text)
        )


def deleting(path: str, use_id: str, done: str) -> Any:
    """A model that asks to delete `path` when the newest message asks for it, says `done`
    once it has the tool's result, and echoes everything else."""

    def responder(body: dict[str, Any]) -> Any:
        text = last_user_text(body)
        if text.endswith(f"please delete {path}"):
            return [
                {"type": "tool_use", "id": use_id, "name": "delete_file", "input": {"path": path}}
            ]
        if text.startswith("tool_result:") and path in json.dumps(body["messages"][-2:]):
            return done
        return None

    return responder


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("busy")
    with owner_chat_running(tmp, CONFIG, Stack, users_in_config=True) as stack:
        yield stack


def test_a_card_waits_while_three_other_messages_are_answered(stack: Stack) -> None:
    path = "/tmp/busy-a"
    stack.llm.set_responder(deleting(path, "toolu_busy_a", f"Deleted {path}."))
    asked = stack.ask(f"please delete {path}")
    card = stack.card(path)
    questions = [f"unrelated question {n}" for n in (1, 2, 3)]
    ids = [stack.ask(q) for q in questions]
    for q, message_id in zip(questions, ids, strict=True):
        answer = stack.answer_to(message_id, f"the answer to {q!r}")
        assert answer["plain_text"].endswith(q)
    # Each of them knew what still waits, from the approvals table.
    context = json.dumps(stack.request_for(questions[0]))
    assert "delete_file" in context and "waiting for your approval" in context
    assert stack.daemon.query("SELECT status FROM approvals")[0][0] == "pending"
    assert f"delete_file {path}" not in stack.daemon.effects()

    stack.approve(card)
    done = stack.answer_to(asked, "the deletion's answer")
    assert done["plain_text"] == f"Deleted {path}."
    stack.daemon.wait_idle(f"chat-{OWNER}")
    assert stack.daemon.effects().count(f"delete_file {path}") == 1
    statuses = stack.daemon.query(
        "SELECT status FROM workflow_instances WHERE workflow = 'turn' AND key = ?",
        (f"chat-{OWNER}",),
    )
    assert [r[0] for r in statuses] == ["complete"] * 4


def test_kill_9_while_a_card_waits_and_another_turn_runs(stack: Stack) -> None:
    path = "/tmp/busy-b"
    stack.llm.set_responder(deleting(path, "toolu_busy_b", f"Deleted {path}."))
    asked = stack.ask(f"please delete {path}")
    card = stack.card(path)
    stack.llm.hold()
    try:
        held = stack.ask("a question while the card waits")
        stack.llm.wait_for_held(1, timeout=60)
        stack.daemon.kill9()
    finally:
        stack.llm.release()
    stack.daemon.start()
    assert stack.answer_to(held, "the held question's answer")["plain_text"].endswith(
        "a question while the card waits"
    )
    after = stack.ask("and one after the restart")
    assert stack.answer_to(after, "the answer after the restart")["plain_text"].endswith(
        "and one after the restart"
    )
    stack.approve(card)
    done = stack.answer_to(asked, "the deletion's answer")
    assert done["plain_text"] == f"Deleted {path}."
    stack.daemon.wait_idle(f"chat-{OWNER}")
    assert stack.daemon.effects().count(f"delete_file {path}") == 1
    cards = [m for m in stack.sent() if m["reply_markup"] and path in m["plain_text"]]
    assert len(cards) == 1  # the card was not sent again after the restart


def test_stop_lists_what_is_under_way_and_stops_the_one_named(stack: Stack) -> None:
    path = "/tmp/busy-c"
    stack.llm.set_responder(deleting(path, "toolu_busy_c", "never said"))
    stack.ask(f"please delete {path}")
    card = stack.card(path)
    stack.llm.hold()
    try:
        stack.ask("a long question")
        stack.llm.wait_for_held(1, timeout=60)
        listed = stack.ask("/stop")
        reply = stack.answer_to(listed, "the /stop list")["plain_text"]
        assert "1. “please delete /tmp/busy-c” — waiting for approval of delete_file" in reply
        assert "2. “a long question” — being answered" in reply
        stop = stack.ask("/stop 1")
        stopped = stack.answer_to(stop, "/stop 1")["plain_text"]
    finally:
        stack.llm.release()
    assert "Stopped working on “please delete /tmp/busy-c”" in stopped
    assert "delete_file" in stopped and "not run" in stopped
    stack.daemon.wait_idle(f"chat-{OWNER}")
    assert stack.daemon.effects().count(f"delete_file {path}") == 0
    edits = [e for e in stack.tg.edits if e["message_id"] == card["message_id"]]
    assert edits and "Stopped" in edits[0]["plain_text"]
    assert any(m["plain_text"].endswith("a long question") for m in stack.sent())


def tool_results(body: dict[str, Any]) -> dict[str, str]:
    blocks = body["messages"][-1]["content"]
    return {
        b["tool_use_id"]: b["content"] if isinstance(b["content"], str) else b["content"][0]["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_result"
    }


def test_independent_reads_of_one_reply_run_at_once(stack: Stack) -> None:
    """Three low-risk calls in one reply meet (each waits for the others to be under way); a
    high-risk call beside them still gets its own card, after them."""
    calls = [
        {"type": "tool_use", "id": f"toolu_rv{x}", "name": "rendezvous"}
        | {"input": {"name": f"rv-{x}", "party": 2}}
        for x in ("a", "b")
    ]
    delete = {"type": "tool_use", "id": "toolu_rv_del", "name": "delete_file"}
    delete["input"] = {"path": "/tmp/busy-rv"}

    def responder(body: dict[str, Any]) -> Any:
        text = last_user_text(body)
        if text.endswith("read both, then delete"):
            return [calls[0], delete, calls[1]]
        if text.startswith("tool_result:") and "toolu_rv_del" in json.dumps(body["messages"][-1]):
            results = tool_results(body)
            return f"a={results['toolu_rva']} b={results['toolu_rvb']}"
        return None

    stack.llm.set_responder(responder)
    asked = stack.ask("read both, then delete")
    (card,) = [stack.card("/tmp/busy-rv")]
    stack.approve(card)
    assert stack.answer_to(asked, "the answer")["plain_text"] == "a=met b=met"
    assert stack.daemon.effects().count("delete_file /tmp/busy-rv") == 1
    steps = [
        r[0]
        for r in stack.daemon.query(
            "SELECT s.name FROM workflow_steps s JOIN workflow_instances i ON i.id = s.instance_id "
            "WHERE i.input LIKE '%read both, then delete%' ORDER BY s.ordinal"
        )
    ]
    # Which calls go together is journaled; each call keeps its own steps and names.
    assert steps.index("plan:toolu_rva") < steps.index("tool:toolu_rva")
    assert {"tool:toolu_rva", "tool:toolu_rvb", "tool:toolu_rv_del"} <= set(steps)
    assert steps.index("tool:toolu_rv_del") > max(
        steps.index("tool:toolu_rva"), steps.index("tool:toolu_rvb")
    )
