"""The Telegram channel's own migration set (`chat.channel.Channel.migrations`).

Applied after the core's list and recorded in the same `schema_migrations`, as `telegram/…`.
Its tables (`updates`, …) stay in the core's first migration, where they were before channels
had sets of their own: a step that created tables is never split after it ran. What is here
reads Telegram's id numbering, which only this package may. Plain SQL, so listing the channel
imports nothing.
"""

from __future__ import annotations

from agentd.db.migrations import Migration


def _before(step: str) -> str:
    """Only rows older than the core's `step`: a database that had them filled by the same
    rule when that step was the core's gets the same values again, and a row stored since
    (perhaps by another channel) keeps what its channel said."""
    return f"created_at < (SELECT applied_at FROM schema_migrations WHERE name = '{step}')"


# Rows from before chats said their kind (the core's m035_chat_kind added the column, 'group'
# by default: the side that shows nothing private) all came from Telegram, whose private chat
# ids are their user's and whose group and channel ids are negative: filled once by that rule.
_BEFORE_KINDS = _before("m035_chat_kind")
CHAT_KIND = f"""
UPDATE schedules SET chat_kind = 'private' WHERE chat_id > 0 AND {_BEFORE_KINDS};
UPDATE approvals SET chat_kind = 'private' WHERE chat_id > 0 AND {_BEFORE_KINDS};
UPDATE workflow_instances
    SET input = json_set(input, '$.chat_kind',
        CASE WHEN json_extract(input, '$.chat_id') > 0 THEN 'private' ELSE 'group' END)
    WHERE json_valid(input) AND json_type(input, '$.chat_id') = 'integer'
        AND json_type(input, '$.chat_kind') IS NULL AND {_BEFORE_KINDS};
"""

# Where each user can be reached privately (the core's m036_users made `user_chats`): the
# private chats written in before, all Telegram's, whose private chat ids are their user's.
PRIVATE_CHATS = f"""
INSERT OR IGNORE INTO user_chats (user_id, channel, chat_id, last_at)
    SELECT user_id, 'telegram', chat_id, MAX(created_at) FROM messages
    WHERE role = 'user' AND user_id IS NOT NULL AND chat_id = user_id
        AND {_before("m036_users")}
    GROUP BY user_id;
"""

MIGRATIONS = (
    Migration("telegram/m001_chat_kind", CHAT_KIND),
    Migration("telegram/m002_private_chats", PRIVATE_CHATS),
)
