"""The Matrix channel's own tables, its migration set (`chat.channel.Channel.migrations`).

Applied after the core's list and recorded in the same `schema_migrations`, as `matrix/…`.
Both steps were in the core list once (m040, m042), so `formerly` names them: a database
that ran them there is not migrated again. Plain SQL, so listing the channel imports nothing.
"""

from __future__ import annotations

from agentd.db.migrations import Migration

TABLES = """
-- The Matrix channel (agentd/matrix). agentd's chats, users and messages are integers; Matrix
-- names them with strings. Each Matrix room, user and event agentd meets gets one local
-- integer here (matrix/ids.py adds 2^53, past every Telegram id), never given twice.
CREATE TABLE matrix_ids (
    n INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('room', 'user', 'event')),
    mxid TEXT NOT NULL,
    room_id TEXT,  -- an event's room
    UNIQUE (kind, mxid)
);
-- Each timeline event intake took (the Telegram `updates` table's twin): never taken twice.
CREATE TABLE matrix_events (
    event_id TEXT PRIMARY KEY,
    received_at REAL NOT NULL,
    room_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    kind TEXT NOT NULL,
    outcome TEXT NOT NULL,
    instance_id TEXT
);
-- What agentd knows of each room from the sync: its members (joined or invited), whether it
-- is encrypted, and whether agentd is in it.
CREATE TABLE matrix_rooms (
    room_id TEXT PRIMARY KEY,
    members TEXT NOT NULL DEFAULT '[]',
    encrypted INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT 'joined'
);
-- An approval card's choices: the reaction key on the card that stands for each button.
CREATE TABLE matrix_buttons (
    event_id TEXT NOT NULL,
    reaction TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (event_id, reaction)
);
"""


DRAFTS = """
-- A Matrix chat's answer being written, shown as a message edited as it grows (m.replace):
-- the answer, when sent, replaces it instead of arriving as a second message.
CREATE TABLE matrix_drafts (
    chat_id INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL
);
"""


# Which events agentd sent, said when it sends them: a reply to one is a reply to the bot.
# Until now that was read from the event being no one intake took, which stops holding once
# retention prunes what intake took; events already known are marked by that reading.
SENT = """
ALTER TABLE matrix_ids ADD COLUMN sent INTEGER NOT NULL DEFAULT 0;
UPDATE matrix_ids SET sent = 1 WHERE kind = 'event'
    AND mxid NOT IN (SELECT event_id FROM matrix_events);
"""


# When each id and each card's choices were made, so retention can age them out
# (matrix/channel.py `kept`); rows from before age from the upgrade.
AGES = """
ALTER TABLE matrix_ids ADD COLUMN made_at REAL NOT NULL DEFAULT 0;
UPDATE matrix_ids SET made_at = CAST(strftime('%s', 'now') AS REAL);
ALTER TABLE matrix_buttons ADD COLUMN made_at REAL NOT NULL DEFAULT 0;
UPDATE matrix_buttons SET made_at = CAST(strftime('%s', 'now') AS REAL);
"""


# A served person's reaction with a card's key on an event whose choices agentd does not know
# (yet): the card may be one Synapse took just before a kill -9, whose choices agentd had not
# written down (output.py). Kept, and taken as the press once they are (intake.py).
EARLY = """
CREATE TABLE matrix_early_reactions (
    event_id TEXT PRIMARY KEY,
    target TEXT NOT NULL,
    reaction TEXT NOT NULL,
    room_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    made_at REAL NOT NULL
);
CREATE INDEX matrix_early_reactions_target ON matrix_early_reactions (target, reaction);
"""


# A draft is its answer's, not its chat's (output.py): keyed by the draft's id as well, so a
# message sent to the chat while an answer streams is a message of its own, and only that
# answer takes the draft's place. A draft open at the upgrade keeps id 0: the chat's next
# answer still replaces it, as it would have before.
ANSWER_DRAFTS = """
CREATE TABLE matrix_answer_drafts (
    chat_id INTEGER NOT NULL,
    draft_id INTEGER NOT NULL,  -- the answer's (agent/streaming.py); 0: opened before
    event_id TEXT NOT NULL,
    PRIMARY KEY (chat_id, draft_id)
);
INSERT INTO matrix_answer_drafts (chat_id, draft_id, event_id)
    SELECT chat_id, 0, event_id FROM matrix_drafts;
DROP TABLE matrix_drafts;
ALTER TABLE matrix_answer_drafts RENAME TO matrix_drafts;
"""


MIGRATIONS = [
    Migration("matrix/m001_tables", TABLES, formerly="m040_matrix"),
    Migration("matrix/m002_drafts", DRAFTS, formerly="m042_matrix_drafts"),
    Migration("matrix/m003_sent", SENT),
    Migration("matrix/m004_ages", AGES),
    Migration("matrix/m005_early", EARLY),
    Migration("matrix/m006_answer_drafts", ANSWER_DRAFTS),
]
