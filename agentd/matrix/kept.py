"""The Matrix channel's tables in retention (`chat.channel.Channel.kept`), beside what intake
took (`matrix_events`): events' integers and cards' choices, each made with its time
(`made_at`), so neither grows for ever. Plain SQL, so listing the channel imports nothing
(but what becomes of a draft, which only the agent knows: its ids are its hash).
"""

from __future__ import annotations

from typing import Any

from agentd.agent.streaming import draft_fate
from agentd.chat.kept import KeptTable
from agentd.matrix.ids import BASE

# A card an approval still waits on, by its integer (`n`): it and its choices stay whatever
# their age.
_WAITED_ON = (
    f"SELECT message_id - {BASE} FROM approvals WHERE status = 'pending' AND message_id IS NOT NULL"
)


def _table(part: str, keep: Any, old: str, key: str, table: str) -> KeptTable:
    def count(conn: Any, cut: float) -> int:
        return int(conn.execute(f"SELECT COUNT(*) {old}", (cut,)).fetchone()[0])

    def prune(conn: Any, cut: float, batch: int) -> int:
        gone = f"DELETE FROM {table} WHERE {key} IN (SELECT {key} {old} LIMIT ?)"
        return int(conn.execute(gone, (cut, batch)).rowcount)

    return KeptTable(part=part, keep=keep, count=count, prune=prune)


def kept_events() -> KeptTable:
    """Events' integers, by `[retention] message_days`: the history names messages by them,
    and a reply's quote is judged by them (intake.py), so they last as long as it does. Never
    the highest integer: SQLite would give it again to the next id, and an old reference
    would name a new message."""
    old = (
        "FROM matrix_ids WHERE kind = 'event' AND made_at < ? "
        "AND n < (SELECT MAX(n) FROM matrix_ids) "
        f"AND n NOT IN ({_WAITED_ON})"
    )
    return _table("matrix_ids", "message_days", old, "n", "matrix_ids")


def kept_buttons() -> KeptTable:
    """Cards' choices nobody answered, by `[retention] update_days`, as a press is what
    intake takes: a reaction on a card older than that is no press. A decided card's go with
    its edit (output.py)."""
    old = (
        "FROM matrix_buttons WHERE made_at < ? AND event_id NOT IN "
        f"(SELECT mxid FROM matrix_ids WHERE n IN ({_WAITED_ON}))"
    )
    return _table("matrix_buttons", "update_days", old, "rowid", "matrix_buttons")


def kept_early() -> KeptTable:
    """Reactions kept for a card whose choices were not known yet (intake.py), by
    `[retention] update_days`: a card is written down within moments of being sent."""
    old = "FROM matrix_early_reactions WHERE made_at < ?"
    return _table(
        "matrix_early_reactions", "update_days", old, "event_id", "matrix_early_reactions"
    )


def kept_drafts() -> KeptTable:
    """Drafts whose turn was answered, by `[retention] update_days` being on (any age): only
    their answer reads them, and it came (its send may have taken the draft's place, which
    an end would hide). A draft whose answer will not come keeps its row until it is ended
    (agent/streaming.py `draft_fate`): the end is made with its row (output.py `end_draft`),
    at the next start if the process died first or the homeserver was down then, so no prune
    in between may take away what that start reads. An open turn's draft stays, and so does
    one opened before drafts were their answer's (id 0): the chat's next answer takes its
    place."""

    def answered(conn: Any) -> list[tuple[int, int]]:
        rows = conn.execute("SELECT chat_id, draft_id FROM matrix_drafts WHERE draft_id != 0")
        found = [(int(c), int(d)) for c, d in rows.fetchall()]
        return [(c, d) for c, d in found if draft_fate(conn, c, d) == "answered"]

    def count(conn: Any, cut: float) -> int:
        return len(answered(conn))

    def prune(conn: Any, cut: float, batch: int) -> int:
        gone = answered(conn)[:batch]
        sql = "DELETE FROM matrix_drafts WHERE chat_id = ? AND draft_id = ?"
        conn.executemany(sql, gone)
        return len(gone)

    return KeptTable(part="matrix_drafts", keep="update_days", count=count, prune=prune)
