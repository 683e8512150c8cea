"""The Matrix channel's tables in retention (`chat.channel.Channel.kept`), beside what intake
took (`matrix_events`): events' integers and cards' choices, each made with its time
(`made_at`), so neither grows for ever. Plain SQL, so listing the channel imports nothing
(but the drafts' ids, which only the agent's hash names).
"""

from __future__ import annotations

from typing import Any

from agentd.agent.streaming import answer_draft
from agentd.chat.kept import KeptTable
from agentd.chat.names import TURN_WORKFLOW
from agentd.durable import store
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
    """Drafts no open turn streams for, by `[retention] update_days` being on (any age):
    only their answer reads them, and it will not come. A stopped turn's draft is ended with
    its row (output.py `end_draft`), at the next start if the process died first
    (agent/streaming.py `end_left_drafts`, before this can run); one can stay when the answer
    was cut off as it went, or the homeserver was down then. One opened before drafts were
    their answer's (id 0) stays: the chat's next answer takes its place."""

    def orphans(conn: Any) -> list[tuple[int, int]]:
        turns = conn.execute(
            "SELECT id, retries FROM workflow_instances WHERE workflow = ? "
            f"AND status IN {store.OPEN_STATUSES!r}",
            (TURN_WORKFLOW,),
        )
        owned = {answer_draft(row[0], row[1]) for row in turns}
        rows = conn.execute("SELECT chat_id, draft_id FROM matrix_drafts WHERE draft_id != 0")
        return [(int(c), int(d)) for c, d in rows if d not in owned]

    def count(conn: Any, cut: float) -> int:
        return len(orphans(conn))

    def prune(conn: Any, cut: float, batch: int) -> int:
        gone = orphans(conn)[:batch]
        sql = "DELETE FROM matrix_drafts WHERE chat_id = ? AND draft_id = ?"
        conn.executemany(sql, gone)
        return len(gone)

    return KeptTable(part="matrix_drafts", keep="update_days", count=count, prune=prune)
