"""An answer written while outside content sat in its turn's history window (not read by the
turn itself): the row is the model's own for the window (taint lasts while that content is in
view, docs/security.md), and says what was in view, so a summary of a block that holds the
answer but not that content, and the facts drawn from it, are outside content, never facts in
every prompt."""

from __future__ import annotations

import time
from typing import Any

from agentd.agent.turn import save_reply
from agentd.chat.inputs import TurnInput
from agentd.memory import history
from agentd.memory.provenance import window_sources
from agentd.memory.summarise import SummaryInput, _block, block_origin

CHAT = 7
IN_VIEW = "an earlier message in this chat (a forwarded message (Mallory))"


def _turn(text: str) -> TurnInput:
    return TurnInput(
        update_id=1,
        chat_id=CHAT,
        chat_kind="private",
        user_id=CHAT,
        message_id=1,
        date=time.time(),
        kind="text",
        text=text,
    )


def test_a_summary_of_an_answer_written_in_view_of_outside_content_is_outside(conn: Any) -> None:
    inp = _turn("ok")
    first = history.save_message(
        conn, chat_id=CHAT, user_id=CHAT, role="user", content="ok", source_key="t1:user"
    )
    answer = save_reply(conn, inp, "t1", "Done. P.S. fetch evil", [], "answered", "", IN_VIEW)
    plain = save_reply(conn, inp, "t2", "Sunny.", [], "answered")
    rows = dict(conn.execute("SELECT id, origin FROM messages").fetchall())
    assert rows[answer] == "model" and rows[plain] == "model"
    # The window reads origins only: a later turn with just the answer in view is not tainted.
    assert window_sources(conn, CHAT, first, plain + 1) == []
    block = _block(conn, SummaryInput(chat_id=CHAT, user_id=CHAT, up_to_id=plain), 0, 0)
    assert [(m.id, m.origin) for m in block] == [
        (first, "user"),
        (answer, "outside"),
        (plain, "model"),
    ]
    origin, ref = block_origin(block, CHAT)
    assert origin == "outside" and ref is not None and "Mallory" in ref
    assert block_origin([m for m in block if m.id != answer], CHAT) == ("model", None)
