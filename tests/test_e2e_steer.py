"""End to end: a message that arrives while a turn of its chat works (docs/messages.md, "A
message while a turn works"): steered into the working turn by default, or, with
`[chat] busy = "interrupt"`, replacing it — each decision journaled, so a kill -9 between
the message and the turn's next step replays the same one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon_process import OWNER
from tests.fakes.anthropic import last_user_text
from tests.owner_chat import OwnerChat, owner_chat_running

ADDED = "The user added this while you were working"


class Stack(OwnerChat):
    def answer_to(self, message_id: int, what: str) -> dict[str, Any]:
        return self.tg.wait_until(  # type: ignore[no-any-return]
            lambda: next(
                (m for m in self.sent() if m.get("reply_to_message_id") == message_id), None
            ),
            60,
            what,
        )

    def replies_to(self, message_id: int) -> list[dict[str, Any]]:
        return [m for m in self.sent() if m.get("reply_to_message_id") == message_id]

    def turn_of(self, text: str) -> tuple[str, str, str | None]:
        rows = self.daemon.query(
            "SELECT id, status, output FROM workflow_instances WHERE workflow = 'turn' "
            "AND json_extract(input, '$.text') = ?",
            (text,),
        )
        return (rows[0][0], rows[0][1], rows[0][2]) if rows else ("", "", None)

    def restart(self, **env: str) -> None:
        self.daemon.stop()
        self.daemon.env.update(env)
        self.daemon.start()


def counting(marker: str) -> Any:
    """Counts the words of `marker` with a tool, then answers, saying whether the user added
    something meanwhile; echoes everything else."""

    def responder(body: dict[str, Any]) -> Any:
        text = last_user_text(body)
        if text.endswith(f"count the words in {marker}"):
            use = {"type": "tool_use", "id": f"toolu_{marker.replace(' ', '_')}"}
            return [{**use, "name": "count_words", "input": {"text": marker}}]
        if text.startswith("tool_result:") and marker in json.dumps(body["messages"][-3:]):
            return f"Counted {marker} ({'with the addition' if ADDED in text else 'alone'})."
        return None

    return responder


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = '[tools]\nplugins = ["tests.plugins.e2e_tools"]\n'
    with owner_chat_running(tmp_path_factory.mktemp("steer"), config, Stack) as stack:
        yield stack


def steer_while_held(s: Stack, marker: str, addition: str, kill: bool) -> tuple[int, int]:
    s.llm.set_responder(counting(marker))
    s.llm.hold()
    try:
        asked = s.ask(f"please count the words in {marker}")
        s.llm.wait_for_held(1, timeout=60)
        added = s.ask(addition)
        s.tg.wait_until(lambda: s.turn_of(addition)[0], 30, "the addition's turn stored")
        if kill:
            s.daemon.kill9()
    finally:
        s.llm.release()
    if kill:
        s.daemon.start()
    return asked, added


@pytest.mark.parametrize("kill", [False, True], ids=["live", "kill-9"])
def test_a_message_sent_while_a_turn_works_steers_it(stack: Stack, kill: bool) -> None:
    s = stack
    marker = f"steer {'killed' if kill else 'live'} one two"
    addition = f"and in French please ({marker})"
    asked, added = steer_while_held(s, marker, addition, kill)
    answer = s.answer_to(asked, "the steered answer")
    assert answer["plain_text"] == f"Counted {marker} (with the addition)."
    s.daemon.wait_idle(f"chat-{OWNER}")
    assert s.replies_to(added) == []  # answered within the first, not on its own
    _, status, output = s.turn_of(addition)
    assert status == "complete" and json.loads(output or "{}")["outcome"] == "steered"
    assert s.daemon.effects().count(f"count_words {marker}") == 1
    # History reads as one request (with the addition) and one answer.
    history = s.daemon.cli_json("history", "--chat", str(OWNER))
    request = next(
        m for m in history if m["content"].startswith(f"please count the words in {marker}")
    )
    assert addition in request["content"]


def test_a_message_after_the_last_model_call_is_answered_on_its_own(stack: Stack) -> None:
    s = stack
    s.llm.set_responder(None)
    s.llm.hold()
    try:
        first = s.ask("a plain question")
        s.llm.wait_for_held(1, timeout=60)
        second = s.ask("a second plain question")
    finally:
        s.llm.release()
    assert s.answer_to(first, "the first")["plain_text"].endswith("a plain question")
    assert s.answer_to(second, "the second")["plain_text"].endswith("a second plain question")


@pytest.mark.parametrize("kill", [False, True], ids=["live", "kill-9"])
def test_interrupt_replaces_the_working_turn(stack: Stack, kill: bool) -> None:
    s = stack
    if s.daemon.env.get("AGENTD_CHAT__BUSY") != "interrupt":
        s.restart(AGENTD_CHAT__BUSY="interrupt")
    marker = f"interrupt {'killed' if kill else 'live'} three"
    s.llm.set_responder(counting(marker))
    s.llm.hold()
    try:
        asked = s.ask(f"please count the words in {marker}")
        s.llm.wait_for_held(1, timeout=60)
        instead = s.ask(f"never mind, something else ({marker})")
        s.tg.wait_until(
            lambda: s.daemon.query(
                "SELECT 1 FROM workflow_instances WHERE id = ? AND "
                "(cancel_requested = 1 OR status = 'cancelled')",
                (s.turn_of(f"please count the words in {marker}")[0],),
            ),
            30,
            "the working turn's cancel journaled",
        )
        if kill:
            s.daemon.kill9()
    finally:
        s.llm.release()
    if kill:
        s.daemon.start()
    answer = s.answer_to(instead, "the interrupting message's answer")
    assert answer["plain_text"].endswith(f"never mind, something else ({marker})")
    s.daemon.wait_idle(f"chat-{OWNER}")
    assert s.replies_to(asked) == []
    assert s.turn_of(f"please count the words in {marker}")[1] == "cancelled"
    assert s.daemon.effects().count(f"count_words {marker}") == 0
