"""The query recall builds from the message and the recent turns; dates of time expressions."""

from __future__ import annotations

import asyncio
from datetime import datetime

from agentd.agent.recall_query import recall_query
from agentd.chat.inputs import TurnInput
from agentd.memory.in_context import carried_words, words_in_context
from agentd.memory.when import resolve, time_context
from tests.heartbeat import LIMIT, heartbeat


def test_a_message_that_leans_on_context_borrows_the_recent_names() -> None:
    recent = ["I had lunch with Anna in Lyon.", "Nice! How is she?"]
    assert words_in_context("what did she say about it?", recent) == (
        "what did she say about it? Anna Lyon"
    )
    # Standing on its own, it is searched as it is, whatever came before.
    assert words_in_context("When is the dentist appointment?", recent) == (
        "When is the dentist appointment?"
    )
    assert words_in_context("and her?", []) == "and her?"
    # Names already in the message are not repeated; newest turn first.
    assert words_in_context("Did Anna like it?", ["Marc came too", "Anna loved Porto"]) == (
        "Did Anna like it? Porto Marc"
    )


def test_time_expressions_resolve_against_when_they_were_said() -> None:
    said = datetime(2023, 8, 3)
    assert resolve("we went camping last weekend", said) == datetime(2023, 7, 27)
    assert resolve("two weeks ago I ran", said) == datetime(2023, 7, 20)
    assert resolve("see you next month", said) == datetime(2023, 9, 1)
    assert time_context("I went yesterday", said) == (
        "(when: 2 August 2023, August 2023, summer 2023)"
    )
    assert time_context("nothing dated here", said) is None
    assert time_context("yesterday", None) is None


def test_names_may_hold_hyphens_but_do_not_end_in_one() -> None:
    said = "Met Jean-Luc- and Marie-claire, then AB-C and X-y_Z. Great!"
    assert carried_words([said], set()) == ["Met", "Jean-Luc", "Marie-claire", "X-y_Z"]


async def test_a_long_earlier_message_never_holds_the_loop_in_recall_query() -> None:
    """recall_query runs on the event loop (agent.turn.think) over the recent turns: the name
    regex was quadratic in "A-A-A-…", and a 40 KB earlier message held the loop for seconds."""
    inp = TurnInput(
        origin="chat",
        update_id=1,
        message_id=1,
        chat_id=1,
        chat_kind="private",
        user_id=1,
        date=0.0,
        kind="text",
        text="and what did she say?",
    )
    async with heartbeat() as beat:
        await asyncio.sleep(0)
        recall_query(inp, (), ["A-" * 20_000, "ok"])  # as turn.think calls it, inline
    assert beat.largest < LIMIT, f"the loop was held {beat.largest:.1f} s"
