"""The web chat's own table, its migration set (`chat.channel.Channel.migrations`): applied
after the core's list and recorded in the same `schema_migrations`, as `webchat/…`.

What the owner posted, under the key the page chose (a re-post is the same message), and what
the agent said, under its send step's key (a re-send after a crash is the same message). `seq`
grows with every change, new or edited: the page's cursor. Plain SQL, so listing the channel
imports nothing.
"""

from __future__ import annotations

from agentd.db.migrations import Migration

MESSAGES = """
CREATE TABLE webchat_messages (
    id INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    role TEXT NOT NULL CHECK (role IN ('owner', 'agent')),
    text TEXT NOT NULL,
    buttons TEXT NOT NULL DEFAULT '[]',
    file_name TEXT,
    file_sha256 TEXT,
    client_key TEXT UNIQUE,
    send_key TEXT UNIQUE,
    instance_id TEXT,
    reply_to INTEGER,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
"""

MIGRATIONS = [Migration("webchat/m001_messages", MESSAGES)]
