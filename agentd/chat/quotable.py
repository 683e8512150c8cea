"""What agentd sent a chat outside an answer (a reminder, an automation's message, a watch's
alert, a job's or a mail notice), kept in `sent_notices` for one use: when the user replies to
it, the quote is what agentd really sent, not the sender's own copy (a Matrix reply's
fallback, which their client writes and can make say anything).

Never history: a notice read back as an assistant turn would be something the model said in
every later prompt, and many carry outside text (a mail's subject, a job's output). So no
prompt window, summary or fact reads this table; retention prunes it with the messages
(`[retention] message_days`, retention/prune.py).
"""

from __future__ import annotations

from typing import Any

# Whose words a quote of a notice is: agentd's, though they may carry outside text, so the
# turn that quotes one is tainted (memory/provenance.py, agent/taint.py).
QUOTED_NOTICE = "a quoted notice of mine (it may carry outside text)"


def keep(conn: Any, chat_id: int, message_id: int, text: str, now: float) -> None:
    """Keep the text of chat message `message_id`, once (a replayed send keeps the first)."""
    conn.execute(
        "INSERT OR IGNORE INTO sent_notices (chat_id, message_id, text, sent_at) "
        "VALUES (?, ?, ?, ?)",
        (chat_id, message_id, text, now),
    )


def notice_text(conn: Any, chat_id: int, message_id: int) -> str | None:
    """What agentd sent as notice `message_id` in this chat; None: no notice kept there."""
    row = conn.execute(
        "SELECT text FROM sent_notices WHERE chat_id = ? AND message_id = ?",
        (chat_id, message_id),
    ).fetchone()
    return None if row is None else str(row[0])
