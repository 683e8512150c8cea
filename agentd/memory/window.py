"""What surrounds a stored turn: the messages around it in its conversation.

In a chat one thought is often typed as several short messages ("went to the lake", "w the
kids", "sunday"), and an answer comes a message or two after the question. The words that make a
message findable are then in its neighbours, not in it. So a turn stored as a memory keeps the
`reach` messages before and after it (same session) as what is `nearby`: indexed for keyword
search at the weight of its context (memory/search.py FTS_WEIGHTS), neither embedded nor shown.
Its `context` stays the message it answers, embedded with it.

Measured on LoCoMo and on a messaging-app rendering of it (benchmarks/README.md, "Memory recall
that generalises, also on chat-like text"): two messages each side was the best of the windows
tried for keyword search on both; embedding the whole window too lost recall on LoCoMo, so it is
not embedded.
"""

from __future__ import annotations

from collections.abc import Sequence

REACH = 2  # messages on each side


def window_contexts(messages: Sequence[str], reach: int = REACH) -> list[str | None]:
    """For each message of one session, in order: the up to `reach` messages before it and after
    it, in order, one per line; None for a message alone in its session."""
    out: list[str | None] = []
    for i in range(len(messages)):
        around = [*messages[max(0, i - reach) : i], *messages[i + 1 : i + 1 + reach]]
        out.append("\n".join(around) if around else None)
    return out
