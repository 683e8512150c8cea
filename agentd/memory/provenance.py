"""Where what the model sees came from, as stored with it (migration m032_provenance).

Every message, summary, fact and memory records its origin when it is written: the user's own
words (`user`), the model's (`model`), or outside content (`outside`: a forwarded message, a
document, a webhook body, a page or mail a tool read, and whatever the model wrote or the
summariser extracted while reading such content). A turn reads the origins of what it puts in
its prompt (its history window, a quoted message, recalled memories) and is tainted by the
outside ones (agent/taint.py) for as long as they are in view.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from agentd.chat import quotable

_MAX_REF = 200


# An answer's meta key: the outside content that sat in its turn's history window (not read
# by the turn itself). The window taints the turns that have that content in view; a summary
# of a block holding the answer but not that content counts it as outside (summarise.py).
IN_VIEW_OF = "in_view_of"


def ref_of(sources: Sequence[str]) -> str:
    """What an outside row says it came from: the first sources, in words."""
    return "; ".join(sources[:3])[:_MAX_REF]


def window_sources(conn: Any, chat_id: int, start_id: int, before_id: int) -> list[str]:
    """The outside content among the history a turn sends (ids `start_id` ≤ id < `before_id`,
    withdrawn requests left out, as history.turns_between does), one source per kind."""
    rows = conn.execute(
        "SELECT role, origin_ref FROM messages WHERE chat_id = ? AND id >= ? AND id < ? "
        "AND origin = 'outside' AND json_extract(meta, '$.withdrawn') IS NULL ORDER BY id",
        (chat_id, start_id, before_id),
    ).fetchall()
    found: list[str] = []
    for role, ref in rows:
        if role == "user":
            source = f"an earlier message in this chat ({ref or 'outside content'})"
        else:
            source = f"an earlier answer in this chat that drew on {ref or 'outside content'}"
        if source not in found:
            found.append(source)
    return found


OTHER_MEMBER = "an earlier message of another member of this group"


def others_in_window(conn: Any, chat_id: int, user_id: int, start_id: int, before_id: int) -> bool:
    """Whether the history a turn sends holds another user's messages (or the answers to
    them): in a group, the words of a member the turn's user is not."""
    row = conn.execute(
        "SELECT 1 FROM messages WHERE chat_id = ? AND id >= ? AND id < ? AND user_id IS NOT NULL "
        "AND user_id != ? AND json_extract(meta, '$.withdrawn') IS NULL LIMIT 1",
        (chat_id, start_id, before_id, user_id),
    ).fetchone()
    return row is not None


def _quoted_row(conn: Any, chat_id: int, message_id: int) -> tuple[str, str, str | None] | None:
    row = conn.execute(
        "SELECT role, origin, origin_ref FROM messages WHERE chat_id = ? AND EXISTS "
        "(SELECT 1 FROM json_each(messages.telegram_message_ids) WHERE value = ?) "
        "ORDER BY id DESC LIMIT 1",
        (chat_id, message_id),
    ).fetchone()
    return (row[0], row[1], row[2]) if row else None


def quoted_source(
    conn: Any, chat_id: int, private: bool, message_id: int, from_bot: bool
) -> str | None:
    """The outside content a quoted message brings in, or None. A group's quotes are taken
    as outside whoever wrote them (taint.input_sources), but for the bot's words as the server
    or agentd's record has them; in a private chat, a quote of the user's own words or of an
    answer the model wrote from them is clean, while an answer that drew on outside content
    is not, in any chat. A quoted notice (a finished job's output, a mail's subject, an automation's
    message) is not, in any chat."""
    # A group's quote of a member is outside already (taint.input_sources); of the bot, it is
    # what that answer drew on, as in a private chat.
    found = _quoted_row(conn, chat_id, message_id) if private or from_bot else None
    if found is not None:
        _, origin, ref = found
        return f"a quoted message ({ref or 'outside content'})" if origin == "outside" else None
    # Not an answer of a turn: in a private chat, the bot's words can only be a notice (kept
    # or no longer); elsewhere, one agentd kept as its notice.
    if from_bot and (private or quotable.notice_text(conn, chat_id, message_id) is not None):
        return quotable.QUOTED_NOTICE
    return None


def context_sources(
    conn: Any,
    chat_id: int,
    private: bool,
    start_id: int,
    before_id: int,
    quoted: tuple[int, bool] | None,
    user_id: int | None = None,
) -> tuple[list[str], list[str]]:
    """(the history window's outside sources, the quoted message's) for a turn, in one read;
    `quoted` is the quoted message's Telegram id and whether the bot wrote it. In a chat that
    is not private, another member's words in the window (`user_id`: the turn's user) are
    outside content for this turn: its user did not write them."""
    window = window_sources(conn, chat_id, start_id, before_id)
    if not private and user_id is not None:
        if others_in_window(conn, chat_id, user_id, start_id, before_id):
            window.append(OTHER_MEMBER)
    said = quoted_source(conn, chat_id, private, *quoted) if quoted is not None else None
    return window, [said] if said else []


# -- memories ---------------------------------------------------------------------------------


def outside_memories(conn: Any, ids: Iterable[int]) -> dict[int, str]:
    """Of these memories, the ones derived from outside content, with where from."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    marks = ",".join("?" * len(wanted))
    rows = conn.execute(
        f"SELECT id, origin_ref FROM memories WHERE id IN ({marks}) AND origin = 'outside'",
        wanted,
    ).fetchall()
    return {int(r[0]): r[1] or "outside content" for r in rows}
