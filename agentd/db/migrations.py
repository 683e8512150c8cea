"""Numbered schema migrations, each applied once at start and recorded in `schema_migrations`.

`MIGRATIONS` is the core's list. A chat channel brings its own tables (`chat.channel.Channel`'s
`migrations`): a set named after it (`matrix/m001_tables`), applied after the core's list in
the channel list's order (`agentd.channels.migrations()`), recorded in the same table. A step
that the core list applied before a channel owned it names its old name in `formerly`: a
database that recorded that name has the row renamed, in its own transaction, and the step
is not run again (the way llm's and sqlite-migrate's plugins keep their own migration sets).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Migration:
    """One step of a schema: its unique name, its SQL, and the name a database may have
    recorded it under before (a step the core list ran before a channel owned it)."""

    name: str
    sql: str
    formerly: str = ""


M001_CORE = """
CREATE TABLE kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- R-DUR-11: one runner per database.
CREATE TABLE runner_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    pid INTEGER NOT NULL,
    hostname TEXT NOT NULL,
    started_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL
);

-- Every Telegram update seen, by update_id (R-IN-2). Content only for accepted updates.
CREATE TABLE updates (
    update_id INTEGER PRIMARY KEY,
    received_at REAL NOT NULL,
    kind TEXT NOT NULL,
    chat_id INTEGER,
    user_id INTEGER,
    outcome TEXT NOT NULL,
    instance_id TEXT
);

CREATE TABLE workflow_instances (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    workflow TEXT NOT NULL,
    key TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('queued', 'running', 'waiting', 'sleeping', 'complete', 'errored', 'cancelled')),
    input TEXT NOT NULL,
    output TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    finished_at REAL,
    wake_at REAL,
    waiting_for TEXT,
    runs INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX workflow_instances_open ON workflow_instances (key, seq)
    WHERE status NOT IN ('complete', 'errored', 'cancelled');

CREATE TABLE workflow_steps (
    instance_id TEXT NOT NULL REFERENCES workflow_instances (id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed', 'unknown')),
    delivery TEXT NOT NULL DEFAULT 'at_least_once',
    result TEXT,
    error TEXT,
    started_at REAL NOT NULL,
    finished_at REAL,
    wake_at REAL,
    PRIMARY KEY (instance_id, ordinal)
);

CREATE TABLE workflow_attempts (
    instance_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    outcome TEXT NOT NULL DEFAULT 'running',
    error TEXT,
    PRIMARY KEY (instance_id, ordinal, attempt),
    FOREIGN KEY (instance_id, ordinal) REFERENCES workflow_steps (instance_id, ordinal)
        ON DELETE CASCADE
);

-- The durable mailbox (R-DUR-3): an event sent before the wait starts is kept here.
CREATE TABLE workflow_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    event_id TEXT UNIQUE,
    created_at REAL NOT NULL,
    consumed_at REAL,
    consumed_by INTEGER
);
CREATE INDEX workflow_events_pending ON workflow_events (instance_id, type)
    WHERE consumed_at IS NULL;

CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL,
    user_id INTEGER,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content TEXT NOT NULL,
    created_at REAL NOT NULL,
    instance_id TEXT,
    telegram_message_ids TEXT NOT NULL DEFAULT '[]',
    source_key TEXT UNIQUE,
    summarised INTEGER NOT NULL DEFAULT 0,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX messages_chat ON messages (chat_id, id);

CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    chat_id INTEGER,
    user_id INTEGER,
    instance_id TEXT,
    detail TEXT NOT NULL DEFAULT '{}',
    source_key TEXT UNIQUE
);
CREATE INDEX audit_at ON audit (at);

-- R-LLM-4: one row per answered model call (a call repeated after a crash is billed twice,
-- so it is recorded twice).
CREATE TABLE llm_usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    instance_id TEXT,
    step TEXT,
    attempt INTEGER,
    chat_id INTEGER,
    purpose TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX llm_usage_at ON llm_usage (at);
"""

M002_MEMORY = """
-- Long-term memory (SPEC 8): summaries, facts and notes per user. Deleting a row removes its
-- FTS entry (triggers below) and its vector (FK cascade, then a per-space trigger on vec0).
CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a stale vector can't alias a new row
    user_id INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('summary', 'fact', 'preference', 'task', 'note', 'turn')),
    content TEXT NOT NULL,
    slot TEXT,  -- facts: normalised key; a new fact with the same key replaces the old one
    source TEXT NOT NULL DEFAULT '',
    source_key TEXT UNIQUE,  -- idempotency key (a resumed summariser never stores twice)
    chat_id INTEGER,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    fts_cjk TEXT  -- character n-grams of CJK runs (unicode61 does not segment them)
);
CREATE INDEX memories_user ON memories (user_id, kind, id);
CREATE UNIQUE INDEX memories_slot ON memories (user_id, slot) WHERE slot IS NOT NULL;

CREATE VIRTUAL TABLE memory_fts USING fts5(
    content, fts_cjk, content='memories', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memory_fts (rowid, content, fts_cjk) VALUES (new.id, new.content, new.fts_cjk);
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content, fts_cjk)
        VALUES ('delete', old.id, old.content, old.fts_cjk);
END;
CREATE TRIGGER memories_fts_au AFTER UPDATE OF content, fts_cjk ON memories BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content, fts_cjk)
        VALUES ('delete', old.id, old.content, old.fts_cjk);
    INSERT INTO memory_fts (rowid, content, fts_cjk) VALUES (new.id, new.content, new.fts_cjk);
END;

-- One row per embedding model and dimension. Its vec0 table memory_bq_<id> (sign bits, user as
-- partition key) is created at run time, since the dimension depends on the configured embedder.
CREATE TABLE memory_spaces (
    id INTEGER PRIMARY KEY,
    model_id TEXT NOT NULL,
    dim INTEGER NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (model_id, dim)
);
-- The exact float32 vector of each memory, in the space (model, dim) it was embedded in.
CREATE TABLE memory_vectors (
    memory_id INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    space_id INTEGER NOT NULL REFERENCES memory_spaces (id),
    embedding BLOB NOT NULL
);
CREATE INDEX memory_vectors_space ON memory_vectors (space_id);
"""

M003_APPROVALS = """
-- High-risk tool calls waiting for the owner (R-TOOL-2, R-TOOL-3). Decided exactly once: the
-- decision and the event that wakes the waiting turn are written in one transaction.
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    instance_id TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    user_id INTEGER,
    tool TEXT NOT NULL,
    risk TEXT NOT NULL,
    args_digest TEXT NOT NULL,
    args_preview TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'timed_out')),
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    decided_at REAL,
    decided_by TEXT,
    reason TEXT,
    message_id INTEGER,
    UNIQUE (instance_id, tool_use_id)
);
CREATE INDEX approvals_pending ON approvals (status, created_at);
CREATE INDEX audit_kind ON audit (kind, at);
"""

M004_DOCS = """
-- Documents for search_docs (SPEC 9). A document is one file (absolute path) or one URL; its
-- chunks follow its structure. Hashes make re-ingesting incremental: an unchanged document is
-- skipped, and a changed one keeps (and does not re-embed) the chunks whose hash it still has.
CREATE TABLE doc_documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL UNIQUE,  -- absolute file path or URL
    kind TEXT NOT NULL CHECK (kind IN ('file', 'url')),
    -- the folder, URL list or sitemap it came through: what disappears from it is removed
    root TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    format TEXT NOT NULL,  -- text, markdown, html, pdf
    content_hash TEXT NOT NULL,  -- sha256 of the bytes and of how they were chunked
    size INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX doc_documents_root ON doc_documents (root);

CREATE TABLE doc_chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a stale vector can't alias a new row
    doc_id INTEGER NOT NULL REFERENCES doc_documents (id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    section TEXT NOT NULL DEFAULT '',  -- heading path, "Install > Linux"
    text TEXT NOT NULL,
    hash TEXT NOT NULL,  -- sha256 of what is embedded (section and text)
    fts_cjk TEXT  -- character n-grams of CJK runs (unicode61 does not segment them)
);
CREATE INDEX doc_chunks_doc ON doc_chunks (doc_id, ordinal);

CREATE VIRTUAL TABLE doc_chunks_fts USING fts5(
    section, text, fts_cjk, content='doc_chunks', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER doc_chunks_fts_ai AFTER INSERT ON doc_chunks BEGIN
    INSERT INTO doc_chunks_fts (rowid, section, text, fts_cjk)
        VALUES (new.id, new.section, new.text, new.fts_cjk);
END;
CREATE TRIGGER doc_chunks_fts_ad AFTER DELETE ON doc_chunks BEGIN
    INSERT INTO doc_chunks_fts (doc_chunks_fts, rowid, section, text, fts_cjk)
        VALUES ('delete', old.id, old.section, old.text, old.fts_cjk);
END;
CREATE TRIGGER doc_chunks_fts_au AFTER UPDATE OF section, text, fts_cjk ON doc_chunks BEGIN
    INSERT INTO doc_chunks_fts (doc_chunks_fts, rowid, section, text, fts_cjk)
        VALUES ('delete', old.id, old.section, old.text, old.fts_cjk);
    INSERT INTO doc_chunks_fts (rowid, section, text, fts_cjk)
        VALUES (new.id, new.section, new.text, new.fts_cjk);
END;

-- Vector spaces as for memories (agentd/retrieval/vectors.py); doc_bq_<id> is made at run time.
CREATE TABLE doc_spaces (
    id INTEGER PRIMARY KEY,
    model_id TEXT NOT NULL,
    dim INTEGER NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (model_id, dim)
);
CREATE TABLE doc_vectors (
    chunk_id INTEGER PRIMARY KEY REFERENCES doc_chunks (id) ON DELETE CASCADE,
    space_id INTEGER NOT NULL REFERENCES doc_spaces (id),
    embedding BLOB NOT NULL
);
CREATE INDEX doc_vectors_space ON doc_vectors (space_id);
"""

M006_VISION = """
-- Image summaries by content hash (R-VIS-1): the same image is never summarised twice.
CREATE TABLE vision_cache (
    sha256 TEXT PRIMARY KEY,
    summary TEXT NOT NULL,
    model TEXT NOT NULL,
    width INTEGER,
    height INTEGER,
    created_at REAL NOT NULL,
    image BLOB  -- only with vision.keep_images
);
"""

M005_WEB_CACHE = """
-- web_search results by query (R-WEB-1). key: digest of provider, max_results and the
-- normalised query; a row older than web.cache_ttl is stale and refreshed on the next search.
CREATE TABLE web_cache (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    query TEXT NOT NULL,
    max_results INTEGER NOT NULL,
    results TEXT NOT NULL,
    fetched_at REAL NOT NULL
);
CREATE INDEX web_cache_fetched ON web_cache (fetched_at);
"""

M007_SCHEDULES = """
-- R-SCHED-1: reminders and recurring tasks. `recurrence` is the resolved rule (JSON); each
-- occurrence is its own workflow instance `sched-<id>-<due>`, so it runs at most once.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL,
    chat_id INTEGER NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('message', 'prompt')),
    text TEXT NOT NULL,
    recurrence TEXT NOT NULL,
    timezone TEXT NOT NULL,
    catch_up TEXT NOT NULL CHECK (catch_up IN ('skip', 'once', 'all')),
    state TEXT NOT NULL CHECK (state IN ('active', 'paused', 'done', 'cancelled')),
    next_run REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    created_by TEXT NOT NULL
);
CREATE INDEX schedules_user_state ON schedules (user_id, state);

-- One row per occurrence that came due: sent, started (a prompt turn), missed or failed.
CREATE TABLE schedule_runs (
    schedule_id TEXT NOT NULL REFERENCES schedules (id),
    due REAL NOT NULL,
    outcome TEXT NOT NULL,
    at REAL NOT NULL,
    instance_id TEXT,
    detail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (schedule_id, due)
);
"""

M008_USAGE_CACHE = """
-- Cache writes with the 1-hour TTL are billed at 2x input, 5-minute ones at 1.25x: keep them
-- apart (R-LLM-4). cache_write_tokens stays the total of both.
ALTER TABLE llm_usage ADD COLUMN cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0;
CREATE INDEX llm_usage_chat_at ON llm_usage (chat_id, at);
"""

M013_MEDIA = """
-- Voice and audio transcripts by content hash: the same note is never transcribed twice.
-- dropped = 1: the backend heard only a stock phrase Whisper invents on silence.
CREATE TABLE transcript_cache (
    sha256 TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    model TEXT NOT NULL,
    dropped INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
-- Documents sent in chat: read for the turn, ingested only when the user asks or confirms.
CREATE TABLE chat_documents (
    id TEXT PRIMARY KEY,
    chat_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    file_id TEXT NOT NULL,
    file_name TEXT NOT NULL,
    format TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    title TEXT NOT NULL,
    created_at REAL NOT NULL,
    ingested_at REAL
);
CREATE INDEX chat_documents_chat ON chat_documents (chat_id, created_at);
"""

M014_ONBOARD = """
-- /new: the prompt's history of a chat starts after its latest fresh start; the
-- messages before it stay in the database and in `agentd history`.
CREATE TABLE chat_context (
    chat_id INTEGER PRIMARY KEY,
    since_message_id INTEGER NOT NULL,  -- messages with id <= this are no longer sent
    reset_at REAL NOT NULL
);

-- Retention: the daily prune finds old rows by time without scanning tables.
CREATE INDEX workflow_instances_finished ON workflow_instances (finished_at)
    WHERE finished_at IS NOT NULL;
CREATE INDEX workflow_events_instance ON workflow_events (instance_id);
CREATE INDEX updates_received ON updates (received_at);
-- Usage older than retention.usage_detail_days is kept as one row per day, chat, model and
-- purpose; `calls` says how many model calls such a row stands for (1 for a detailed row).
ALTER TABLE llm_usage ADD COLUMN calls INTEGER NOT NULL DEFAULT 1;

-- Pairing (`agentd pair`, `/start <code>`): one-time codes, stored only as their sha256.
CREATE TABLE pairing_codes (
    code_hash TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    used_by INTEGER,
    used_at REAL
);
-- Users served besides telegram.allowed_user_ids: the ones who paired.
CREATE TABLE paired_users (
    user_id INTEGER PRIMARY KEY,
    chat_id INTEGER,
    username TEXT NOT NULL DEFAULT '',
    paired_at REAL NOT NULL
);
"""

M018_HISTORY_WINDOW = """
-- Prompt caching: where each chat's history window starts, so the cached history
-- prefix moves only when it must, or when the cache has expired anyway (agent/window.py).
CREATE TABLE history_windows (
    chat_id INTEGER PRIMARY KEY,
    start_id INTEGER NOT NULL,  -- the oldest message the window sends
    updated_at REAL NOT NULL
);
"""

M020_HOT_INDEXES = """
-- Per-turn lookups that would walk a chat's whole past: without these, the engine's next open
-- instance of a key scans every finished one before it, and the summary check counts every
-- message of the chat. Partial indexes hold only the rows those queries look for; the queries
-- must keep these exact conditions for SQLite to use them.
CREATE INDEX workflow_instances_open_key ON workflow_instances (key, seq)
    WHERE status IN ('queued', 'running', 'waiting', 'sleeping');
CREATE INDEX messages_unsummarised ON messages (chat_id, id) WHERE summarised = 0;
-- The per-minute rate check counts a user's recent messages without scanning the table.
CREATE INDEX messages_user_recent ON messages (user_id, created_at) WHERE role = 'user';
"""

# The memory FTS table over (content, fts_cjk, context), rebuilt from `memories`, with the
# triggers that keep it in step: m017 created it so, m084 returns to it.
_MEMORY_FTS_THREE_COLUMNS = """
DROP TRIGGER memories_fts_ai;
DROP TRIGGER memories_fts_ad;
DROP TRIGGER memories_fts_au;
DROP TABLE memory_fts;
CREATE VIRTUAL TABLE memory_fts USING fts5(
    content, fts_cjk, context, content='memories', content_rowid='id',
    tokenize='porter unicode61'
);
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memory_fts (rowid, content, fts_cjk, context)
        VALUES (new.id, new.content, new.fts_cjk, new.context);
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content, fts_cjk, context)
        VALUES ('delete', old.id, old.content, old.fts_cjk, old.context);
END;
CREATE TRIGGER memories_fts_au AFTER UPDATE OF content, fts_cjk, context ON memories BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content, fts_cjk, context)
        VALUES ('delete', old.id, old.content, old.fts_cjk, old.context);
    INSERT INTO memory_fts (rowid, content, fts_cjk, context)
        VALUES (new.id, new.content, new.fts_cjk, new.context);
END;
INSERT INTO memory_fts (memory_fts) VALUES ('rebuild');
"""

# Memory context: what a memory answers or where it sits (the message a turn replied
# to, the date of a conversation), kept apart from the memory itself. It is indexed as its own
# FTS column, weighted below the content (agentd/memory/search.py), and embedded with the
# content; it is never shown as the memory. The FTS table gains the column, so it is rebuilt.
M017_RECALL = "ALTER TABLE memories ADD COLUMN context TEXT;" + _MEMORY_FTS_THREE_COLUMNS

# In-process bit-vector copies (agentd/retrieval/bits.py): how many vectors of each
# memory space were ever inserted and deleted, whoever wrote them (the daemon, a CLI command),
# so a process holding a copy of a user's sign bits sees in one small read that it is stale,
# and whether only new rows were added since. Rows are never deleted: a space id reused after
# a drop still counts on from the old one's deletes, so no stale copy can look current.
M019_RECALL = """
CREATE TABLE memory_vector_counts (
    space_id INTEGER PRIMARY KEY,
    inserts INTEGER NOT NULL DEFAULT 0,
    deletes INTEGER NOT NULL DEFAULT 0
);
CREATE TRIGGER memory_vectors_count_ai AFTER INSERT ON memory_vectors BEGIN
    INSERT INTO memory_vector_counts (space_id, inserts) VALUES (new.space_id, 1)
        ON CONFLICT (space_id) DO UPDATE SET inserts = inserts + 1;
END;
CREATE TRIGGER memory_vectors_count_ad AFTER DELETE ON memory_vectors BEGIN
    INSERT INTO memory_vector_counts (space_id, deletes) VALUES (old.space_id, 1)
        ON CONFLICT (space_id) DO UPDATE SET deletes = deletes + 1;
END;
-- Nothing updates a vector in place (set_vectors deletes, then inserts); if anything did, it
-- counts as a delete, which makes every copy reload.
CREATE TRIGGER memory_vectors_count_au AFTER UPDATE ON memory_vectors BEGIN
    INSERT INTO memory_vector_counts (space_id, deletes) VALUES (old.space_id, 1)
        ON CONFLICT (space_id) DO UPDATE SET deletes = deletes + 1;
    INSERT INTO memory_vector_counts (space_id, deletes) VALUES (new.space_id, 1)
        ON CONFLICT (space_id) DO UPDATE SET deletes = deletes + 1;
END;
"""

# Hands: "Always allow this" rules for shell commands (a program and a pattern its
# arguments must match), and the rule each pending shell approval would add if so pressed.
M024_HANDS = """
CREATE TABLE shell_rules (
    id INTEGER PRIMARY KEY,
    program TEXT NOT NULL,
    args_pattern TEXT NOT NULL,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    approval_id TEXT,
    UNIQUE (program, args_pattern)
);
CREATE TABLE shell_rule_offers (
    approval_id TEXT PRIMARY KEY,
    program TEXT NOT NULL,
    args_pattern TEXT NOT NULL
);
"""

# Mail (agentd/mail): each send journaled under its Message-ID before SMTP starts, so a crash
# mid-send is answered from this row and the Sent folder, never by sending again; and where
# the watcher got to in each folder, so a restart does not announce old mail twice.
M025_MAIL = """
CREATE TABLE mail_sends (
    message_id  TEXT PRIMARY KEY,
    account     TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    recipients  TEXT NOT NULL,
    subject     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('sending', 'sent', 'failed')),
    detail      TEXT NOT NULL DEFAULT '',
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE TABLE mail_watch (
    account     TEXT NOT NULL,
    folder      TEXT NOT NULL,
    uidvalidity INTEGER NOT NULL,
    last_uid    INTEGER NOT NULL,
    updated_at  REAL NOT NULL,
    PRIMARY KEY (account, folder)
);
"""

# Automations the owner writes: which version of its code each instance started on, and
# the questions step.ask_owner put to the owner (answered by a button or `workflows signal`).
M026_WORKFLOWS = """
CREATE TABLE automation_runs (
    instance_id TEXT PRIMARY KEY REFERENCES workflow_instances (id) ON DELETE CASCADE,
    automation TEXT NOT NULL,
    version TEXT NOT NULL,
    source TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE automation_questions (
    id TEXT PRIMARY KEY,
    instance_id TEXT NOT NULL REFERENCES workflow_instances (id) ON DELETE CASCADE,
    step TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    text TEXT NOT NULL,
    choices TEXT NOT NULL,
    default_choice TEXT,
    message_id INTEGER,
    status TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'answered', 'timed_out')),
    answer TEXT,
    answered_by TEXT,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    UNIQUE (instance_id, step)
);
"""

# Skills the owner confirmed (`agentd skills add/enable`): the content hash of every file they
# saw, so a skill whose files change is held back until they confirm again.
M027_SKILLS = """
CREATE TABLE skills (
    name TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    description TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('enabled', 'disabled', 'changed')),
    source TEXT NOT NULL,
    scripts INTEGER NOT NULL DEFAULT 0,
    allowed_tools TEXT NOT NULL DEFAULT '[]',
    confirmed_at REAL NOT NULL,
    changed_at REAL,
    change_note TEXT
);
"""

M021_TRUST_ACCESS = """
-- An approval card goes to an approver's private chat (card_chat_id), which may not
-- be the chat the call was made in (chat_id); a press counts only there. The whole call, as
-- canonical JSON with secrets redacted, is kept for `agentd pending --show`, with the tool's
-- source and a fingerprint of its schema and code: a call whose tool changed since it was
-- approved is refused, not run under another implementation.
ALTER TABLE approvals ADD COLUMN card_chat_id INTEGER;
ALTER TABLE approvals ADD COLUMN call_json TEXT;
ALTER TABLE approvals ADD COLUMN tool_source TEXT;
ALTER TABLE approvals ADD COLUMN tool_fingerprint TEXT;
ALTER TABLE approvals ADD COLUMN why TEXT;
-- The words of the message that led to the call (its start), for a card sent to someone else.
ALTER TABLE approvals ADD COLUMN request TEXT;
-- Token budgets and /status are per user: each model call records whose turn it served.
ALTER TABLE llm_usage ADD COLUMN user_id INTEGER;
CREATE INDEX llm_usage_user ON llm_usage (user_id, at);
-- Documents belong to whoever added them in chat; NULL: the owner's library (`agentd ingest`).
ALTER TABLE doc_documents ADD COLUMN added_by INTEGER;
"""

M022_TAINT = """
-- A step that was running each of the last N times the process died is parked. One row
-- per instance that was running when the process died: how far its journal had got (the
-- number of settled steps) and how many deaths in a row found it at that same point.
CREATE TABLE workflow_crashes (
    instance_id TEXT PRIMARY KEY REFERENCES workflow_instances(id) ON DELETE CASCADE,
    frontier INTEGER NOT NULL,
    crashes INTEGER NOT NULL,
    step TEXT NOT NULL DEFAULT '',
    last_at REAL NOT NULL
);
"""

# Where everything the model can see again came from (agent/provenance.py): the user's own
# words, the model's, or outside content (a forwarded message, a document, a webhook body, a
# page a tool read). A turn whose context holds an 'outside' row is tainted while it does.
# Rows from before this: a user's message is taken as theirs unless it was a forwarded one, an
# answer as the model's. Memories have the same two columns, with the same values
# (m031_memory_versions).
M032_PROVENANCE = """
ALTER TABLE messages ADD COLUMN origin TEXT NOT NULL DEFAULT 'user'
    CHECK (origin IN ('user', 'model', 'outside'));
ALTER TABLE messages ADD COLUMN origin_ref TEXT;
UPDATE messages SET origin = 'model' WHERE role = 'assistant';
UPDATE messages SET origin = 'outside', origin_ref = 'a forwarded message'
    WHERE role = 'user' AND content LIKE '[Forwarded message written by %';
-- Hosts the owner allowed a fetch to reach without asking, even after outside content
-- ("Always allow this host" on a fetch's card), and the offer a card's button stands for.
CREATE TABLE fetch_host_rules (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    approval_id TEXT
);
CREATE TABLE fetch_host_offers (
    approval_id TEXT PRIMARY KEY,
    host TEXT NOT NULL
);
"""

M029_DOCS_STATUS = """
-- Each document's state (docs/documents.md): ingested (its chunks are the source as last
-- read), stale (a later read failed, so search serves an older copy), failed (never read,
-- nothing stored); with the reason. Its parsed text is kept up to docs.keep_text_chars, and
-- each chunk has a token estimate (4 characters a token, as knowledge/tokens.py counts).
ALTER TABLE doc_documents ADD COLUMN status TEXT NOT NULL DEFAULT 'ingested'
    CHECK (status IN ('ingested', 'failed', 'stale'));
ALTER TABLE doc_documents ADD COLUMN error TEXT;
ALTER TABLE doc_documents ADD COLUMN raw_text TEXT;  -- NULL: ingested before it was kept
ALTER TABLE doc_documents ADD COLUMN text_chars INTEGER;  -- the whole parsed text's length
ALTER TABLE doc_chunks ADD COLUMN tokens INTEGER;
-- Documents ingested before: their chunk token counts are computed here; their text was not
-- kept, and the chunks overlap, so it is not rebuilt: the next change of the file brings it.
UPDATE doc_chunks SET tokens = (length(text) + 3) / 4;
"""

M030_VISION_LOOKUPS = """
-- Vision-cache lookups per day (UTC) and chat: a hit reused a summary, a miss asked the model.
-- One row per day and chat, so it stays small; `agentd usage` shows them.
CREATE TABLE vision_lookups (
    day TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    misses INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, chat_id)
) WITHOUT ROWID;
"""

M033_USER_LOCALES = """
-- Each user's language (chat/locale.py): what their Telegram client says, and what they chose
-- with /language, which wins.
CREATE TABLE user_locales (
    user_id INTEGER PRIMARY KEY,
    telegram TEXT,
    chosen TEXT,
    updated_at REAL NOT NULL
);
"""


M034_MEMORY_NEIGHBOURS = """
-- The memories stored just before and after one, in its chat and kind (memory/search.py: what
-- re-ranking and neighbour spreading look at): a seek, where (user_id, kind, id) alone scanned
-- every later memory of the user's other chats to find the next one of this chat.
CREATE INDEX memories_chat_seq ON memories (user_id, kind, chat_id, id);
"""


# Memories the owner can see, correct and roll back. `origin` says whose words a memory is:
# 'user' (the owner's own: typed, edited, imported), 'model' (the assistant's summary or
# extraction from the chat), 'outside' (derived from forwarded messages, documents, web pages,
# mail); `origin_ref` the turn or source it came from. Rows made before this are the model's.
# `pinned` facts are always in the prompt. Every change to a memory appends a row to
# `memory_versions` (no foreign key: the history outlives a forgotten memory, so it can be
# restored under its old id).
M031_MEMORY_VERSIONS = """
ALTER TABLE memories ADD COLUMN origin TEXT NOT NULL DEFAULT 'model'
    CHECK (origin IN ('user', 'model', 'outside'));
ALTER TABLE memories ADD COLUMN origin_ref TEXT;
ALTER TABLE memories ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
CREATE TABLE memory_versions (
    id INTEGER PRIMARY KEY,
    memory_id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    action TEXT NOT NULL,  -- add, edit, supersede, merge, forget, restore, import, pin, unpin
    actor TEXT NOT NULL,  -- owner, model, import
    kind TEXT NOT NULL,
    slot TEXT,
    old_content TEXT,
    new_content TEXT,  -- NULL once forgotten
    origin TEXT NOT NULL,
    origin_ref TEXT,
    created_at REAL NOT NULL,
    UNIQUE (memory_id, version)
);
CREATE INDEX memory_versions_user ON memory_versions (user_id, created_at);
CREATE INDEX memories_pinned ON memories (user_id) WHERE pinned = 1;
"""


# The dashboard's login links and sessions, stored hashed (agentd.dashboard.auth).
M028_DASHBOARD = """
CREATE TABLE dashboard_logins (
    token_hash TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    used_at REAL,
    made_by TEXT NOT NULL
);
CREATE TABLE dashboard_sessions (
    session_hash TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    csrf_key TEXT NOT NULL
);
-- The Cost page sums one schedule's or automation's calls, and a turn's timeline its own:
-- found by instance id instead of a scan of every call.
CREATE INDEX IF NOT EXISTS llm_usage_instance ON llm_usage (instance_id);
"""


# The Cost page's daily rollup of model use: one row per finished day, purpose, user and
# model, so a year's view sums a few thousand rows instead of every call. Days are added by
# agentd.dashboard.spend.roll_up once they have been over for an hour (a call stamped just
# before midnight is written by then); this fills the days already over.
M028_DASHBOARD_COST_DAYS = """
CREATE TABLE llm_usage_days (
    day INTEGER NOT NULL,  -- UTC days since the epoch: CAST(at / 86400 AS INTEGER)
    purpose TEXT NOT NULL,
    user_id INTEGER,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cache_write_1h_tokens INTEGER NOT NULL,
    calls INTEGER NOT NULL
);
CREATE INDEX llm_usage_days_day ON llm_usage_days (day);
INSERT INTO kv (key, value)
    VALUES ('cost_days.until', (CAST(strftime('%s', 'now') AS INTEGER) - 3600) / 86400)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value;
INSERT INTO llm_usage_days
    SELECT CAST(at / 86400 AS INTEGER), purpose, user_id, model, SUM(input_tokens),
        SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens),
        SUM(cache_write_1h_tokens), SUM(calls)
    FROM llm_usage
    WHERE at < (SELECT CAST(value AS INTEGER) * 86400 FROM kv WHERE key = 'cost_days.until')
    GROUP BY 1, 2, 3, 4;
"""

M035_CHAT_KIND = """
-- Where a message is, said once: every input and every row that a privacy rule reads later
-- carries the kind of its chat as the channel said it (chat/inputs.py ChatKind), so no rule
-- reads a network's id numbering. A missing kind is 'group' (the side that shows nothing
-- private); the rows stored before are filled by the channel that stored them
-- (telegram/schema.py).
ALTER TABLE schedules ADD COLUMN chat_kind TEXT NOT NULL DEFAULT 'group';
ALTER TABLE approvals ADD COLUMN chat_kind TEXT NOT NULL DEFAULT 'group';
-- Whose answer a card waits for; the card went to that approver's private chat.
ALTER TABLE approvals ADD COLUMN approver_id INTEGER;
UPDATE approvals SET approver_id = card_chat_id;
"""


M041_CHAT_ADDRESSES = """
-- A chat a channel names with a string (a Matrix room's id), by the agentd chat id it has:
-- what lets the owner name such a chat in the configuration ([automations.chats]).
CREATE TABLE chat_addresses (
    address TEXT PRIMARY KEY,
    chat_id INTEGER NOT NULL
);
"""


M081_MATRIX_PAIRING_ROOMS = """
-- A room the bot joined only so a stranger could send a pairing code there: left after a
-- wrong, used or expired code (`leave` = 1), or once no code is waiting any more.
CREATE TABLE matrix_pairing_rooms (
    room_id TEXT PRIMARY KEY,
    stranger TEXT NOT NULL,
    joined_at REAL NOT NULL,
    leave INTEGER NOT NULL DEFAULT 0
);
"""

M082_HOOK_RATES = """
-- A webhook's start-rate bucket (automations/hook_guard.py): kept here so a restart does not
-- refill it.
CREATE TABLE hook_rates (
    hook TEXT PRIMARY KEY,
    tokens REAL NOT NULL,
    at REAL NOT NULL
);
"""

M083_CHAT_DOCUMENT_SOURCES = """
-- A document added from a chat was named "telegram:<chat>/<file>" whichever channel it came
-- through; it is "chat:<chat>/<file>" now (media/chatdocs.py), and one added before keeps a
-- single name, so sending it again changes it instead of adding a second copy.
UPDATE doc_documents
SET source = 'chat:' || substr(source, 10),
    root = CASE WHEN root LIKE 'telegram:%' THEN 'chat:' || substr(root, 10) ELSE root END
WHERE source LIKE 'telegram:%';
"""

M036_USERS = """
-- One person is one agentd user on every channel: another channel's account linked to a user
-- by a pairing code made for that user (access/accounts.py). An account in no row is its own
-- user, so every Telegram user id stays the agentd user id it always was.
CREATE TABLE user_accounts (
    account_id INTEGER PRIMARY KEY,
    user_id INTEGER NOT NULL,
    channel TEXT NOT NULL,
    linked_at REAL NOT NULL
);
CREATE INDEX user_accounts_user ON user_accounts (user_id);
-- A code made to link an account to this user, not to serve a new one.
ALTER TABLE pairing_codes ADD COLUMN link_user_id INTEGER;
-- Where each user can be reached privately, per channel (chat/reach.py): notices and
-- approval cards go there.
CREATE TABLE user_chats (
    user_id INTEGER NOT NULL,
    channel TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    last_at REAL NOT NULL,
    PRIMARY KEY (user_id, channel)
);
-- The private chats written in before are filled by the channel that stored them
-- (telegram/schema.py).
"""


# Watches ("check X and tell me only if Y", agentd/watch/): what each reads and when it
# speaks, what it saw last (so an unchanged source costs no model call), and one row per
# check (`watch_checks`, once per due time). Their occurrences are instances sched-<id>-<due>
# like a schedule's, so `agentd usage --schedule <id>` counts their model calls.
M055_WATCHES = """
CREATE TABLE watches (
    id TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL,
    chat_id INTEGER NOT NULL,
    chat_kind TEXT NOT NULL CHECK (chat_kind IN ('private', 'group', 'channel')),
    label TEXT NOT NULL,
    source TEXT NOT NULL,          -- JSON: agentd.watch.model.Source
    condition TEXT NOT NULL,
    recurrence TEXT NOT NULL,      -- JSON: agentd.schedule.Recurrence
    catch_up TEXT NOT NULL CHECK (catch_up IN ('skip', 'once', 'all')),
    daily_tokens INTEGER,          -- NULL: [watch] daily_tokens
    state TEXT NOT NULL CHECK (state IN ('active', 'paused', 'removed')),
    next_run REAL,
    seen TEXT,                     -- JSON: agentd.watch.model.Seen (NULL: never read)
    fail_streak INTEGER NOT NULL DEFAULT 0,
    failing_told INTEGER NOT NULL DEFAULT 0,
    capped_day TEXT,               -- the UTC day it hit a cap (its ticks hold until the next)
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    created_by TEXT NOT NULL
);
CREATE INDEX watches_user_state ON watches (user_id, state);
CREATE TABLE watch_checks (
    watch_id TEXT NOT NULL REFERENCES watches (id),
    due REAL NOT NULL,
    outcome TEXT NOT NULL,         -- baseline, unchanged, quiet, told, failed, capped, missed
    tokens INTEGER NOT NULL DEFAULT 0,
    at REAL NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (watch_id, due)
);
-- /mute: watch messages to this chat wait until `until`.
CREATE TABLE watch_mutes (
    chat_id INTEGER PRIMARY KEY,
    until REAL NOT NULL
);
"""

# What surrounds a memory, for keyword search only: a turn's neighbouring messages in its chat
# (two messages each side). A thought typed as several short messages has its words spread
# over them, so each is found by the words of the others; unlike `context` it is not embedded
# (dense vectors of a whole window lost recall on LoCoMo, benchmarks/README.md) and never shown.
# The FTS table gains the column, so it is rebuilt; rows stored before have none. m084 drops it.
M065_MEMORY_NEARBY = """
ALTER TABLE memories ADD COLUMN nearby TEXT;
DROP TRIGGER memories_fts_ai;
DROP TRIGGER memories_fts_ad;
DROP TRIGGER memories_fts_au;
DROP TABLE memory_fts;
CREATE VIRTUAL TABLE memory_fts USING fts5(
    content, fts_cjk, context, nearby, content='memories', content_rowid='id',
    tokenize='porter unicode61'
);
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memory_fts (rowid, content, fts_cjk, context, nearby)
        VALUES (new.id, new.content, new.fts_cjk, new.context, new.nearby);
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content, fts_cjk, context, nearby)
        VALUES ('delete', old.id, old.content, old.fts_cjk, old.context, old.nearby);
END;
CREATE TRIGGER memories_fts_au AFTER UPDATE OF content, fts_cjk, context, nearby ON memories
BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, content, fts_cjk, context, nearby)
        VALUES ('delete', old.id, old.content, old.fts_cjk, old.context, old.nearby);
    INSERT INTO memory_fts (rowid, content, fts_cjk, context, nearby)
        VALUES (new.id, new.content, new.fts_cjk, new.context, new.nearby);
END;
INSERT INTO memory_fts (memory_fts) VALUES ('rebuild');
"""


# The nearby column goes: nothing in the daemon ever filled it (only the benchmarks did), and on
# real chat (REALTALK, benchmarks/README.md) a turn's neighbours in keyword search lowered recall
# (0.458 → 0.415). The FTS table is rebuilt with the three columns it had before, then the column
# is dropped (SQLite ≥ 3.35; no index or trigger refers to it by then).
M084_MEMORY_DROP_NEARBY = _MEMORY_FTS_THREE_COLUMNS + "ALTER TABLE memories DROP COLUMN nearby;"

# Earlier versions could store a next run past what a date can show (9999-12-30, the figure
# being agentd.schedule.recurrence.LAST_RUN), and every listing of that user then failed. Such
# a schedule can never run: it is done; such a watch is paused, for the owner to see and remove.
M085_RUNS_PAST_9999 = """
UPDATE schedules SET state = 'done', next_run = NULL WHERE next_run > 253402128000;
UPDATE watches SET state = 'paused', next_run = NULL WHERE next_run > 253402128000;
"""

# The day the owner resumed a watch a cap held: its own caps do not hold it again that day.
M086_WATCH_CAP_LIFTED = "ALTER TABLE watches ADD COLUMN cap_lifted_day TEXT;"


M087_USAGE_ESTIMATES_AUDIO = """
-- An attempt whose answer stream broke partway is billed for what it generated and has its
-- row; 1: its output tokens are estimated from the text received (no usage figure came).
ALTER TABLE llm_usage ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
-- Transcription is billed per minute of audio, not per token (purpose 'transcription').
ALTER TABLE llm_usage ADD COLUMN audio_seconds REAL NOT NULL DEFAULT 0;
ALTER TABLE llm_usage_days ADD COLUMN audio_seconds REAL NOT NULL DEFAULT 0;
"""

# What agentd sent a chat outside an answer (a reminder, a watch's alert, a job's notice...),
# kept only so a reply to it quotes what was really sent (chat/quotable.py); never history.
M088_SENT_NOTICES = """
CREATE TABLE sent_notices (
    chat_id INTEGER NOT NULL,
    message_id INTEGER NOT NULL,
    text TEXT NOT NULL,
    sent_at REAL NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);
CREATE INDEX sent_notices_at ON sent_notices (sent_at);
"""

# How often the owner retried an instance (`agentd workflows retry`): a retried run is a new
# run whose outside effects must not be taken for the earlier run's (a turn's answer drafts:
# agent/streaming.py `answer_draft`), while a restart's replay of the same run is the same.
M089_WORKFLOW_RETRIES = (
    "ALTER TABLE workflow_instances ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;"
)

# What the owner confirmed an MCP server may put in front of the model (tools/mcp_pins.py):
# the hash of its tools' names, descriptions and schemas, and that listing whole.
M045_MCP_PINS = """
CREATE TABLE mcp_pins (
    server TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    listing TEXT NOT NULL,
    confirmed_at REAL NOT NULL,
    seen_digest TEXT NOT NULL DEFAULT ''
);
"""


# A fetch host rule holds in its card's chat for its card's user, not everywhere
# (tools/hostrules.py). A rule made before that is scoped to the chat and user of the card
# that made it; one whose card is gone cannot be placed and is dropped (the next card
# offers it again).
M046_HOST_RULE_SCOPE = """
CREATE TABLE fetch_host_rules_scoped (
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL,
    chat_id INTEGER NOT NULL,
    user_id INTEGER NOT NULL,
    created_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    approval_id TEXT,
    UNIQUE (host, chat_id, user_id)
);
INSERT INTO fetch_host_rules_scoped
    (id, host, chat_id, user_id, created_at, created_by, approval_id)
SELECT r.id, r.host, a.chat_id, a.user_id, r.created_at, r.created_by, r.approval_id
FROM fetch_host_rules r JOIN approvals a ON a.id = r.approval_id
WHERE a.user_id IS NOT NULL;
DROP TABLE fetch_host_rules;
ALTER TABLE fetch_host_rules_scoped RENAME TO fetch_host_rules;
"""


# Webhook bodies accepted, with when (automations/hook_guard.py): a replay is refused by the
# age of the first delivery, across restarts.
M047_HOOK_DELIVERIES = """
CREATE TABLE hook_deliveries (
    digest TEXT PRIMARY KEY,
    hook TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    accepted_at REAL NOT NULL
);
CREATE INDEX hook_deliveries_at ON hook_deliveries (accepted_at);
"""


# What the running daemon loaded of the owner's automations (replaced at each start and
# `agentd automations reload`), so `agentd workflows start` can refuse at the door a name the
# daemon would not run; and the choices an instance offered for an event it waits for, so a
# selection that was not offered is refused before it is accepted.
M050_AUTOMATIONS_LOADED = """
CREATE TABLE automation_loaded (
    automation TEXT NOT NULL,
    version TEXT NOT NULL,
    source TEXT NOT NULL,
    pid INTEGER NOT NULL,
    loaded_at REAL NOT NULL,
    PRIMARY KEY (automation, version)
);
CREATE TABLE automation_offers (
    instance_id TEXT NOT NULL REFERENCES workflow_instances (id) ON DELETE CASCADE,
    event TEXT NOT NULL,
    field TEXT NOT NULL,
    options TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (instance_id, event)
);
"""


MIGRATIONS: list[tuple[str, str]] = [  # the core's; a channel's are its own (see above)
    ("m001_core", M001_CORE),
    ("m002_memory", M002_MEMORY),
    ("m003_approvals", M003_APPROVALS),
    ("m004_docs", M004_DOCS),
    ("m005_web_cache", M005_WEB_CACHE),
    ("m006_vision", M006_VISION),
    ("m007_schedules", M007_SCHEDULES),
    ("m008_usage_cache", M008_USAGE_CACHE),
    ("m013_media", M013_MEDIA),
    ("m014_onboard", M014_ONBOARD),
    ("m017_recall", M017_RECALL),
    ("m018_history_window", M018_HISTORY_WINDOW),
    ("m019_recall", M019_RECALL),
    ("m020_hot_indexes", M020_HOT_INDEXES),
    ("m024_hands", M024_HANDS),
    ("m025_mail", M025_MAIL),
    ("m026_workflows", M026_WORKFLOWS),
    ("m027_skills", M027_SKILLS),
    ("m021_trust_access", M021_TRUST_ACCESS),
    ("m022_taint", M022_TAINT),
    ("m031_memory_versions", M031_MEMORY_VERSIONS),
    # Named as `agentd dashboard` applied it on its own first: recorded once, never twice.
    ("m028_dashboard", M028_DASHBOARD),
    ("m028_dashboard_cost_days", M028_DASHBOARD_COST_DAYS),
    ("m029_docs_status", M029_DOCS_STATUS),
    ("m030_vision_lookups", M030_VISION_LOOKUPS),
    ("m032_provenance", M032_PROVENANCE),
    ("m033_user_locales", M033_USER_LOCALES),
    ("m034_memory_neighbours", M034_MEMORY_NEIGHBOURS),
    ("m035_chat_kind", M035_CHAT_KIND),
    ("m055_watches", M055_WATCHES),
    ("m065_memory_nearby", M065_MEMORY_NEARBY),
    ("m045_mcp_pins", M045_MCP_PINS),
    ("m046_host_rule_scope", M046_HOST_RULE_SCOPE),
    ("m047_hook_deliveries", M047_HOOK_DELIVERIES),
    ("m050_automations_loaded", M050_AUTOMATIONS_LOADED),
    ("m041_chat_addresses", M041_CHAT_ADDRESSES),
    ("m036_users", M036_USERS),
    ("m081_matrix_pairing_rooms", M081_MATRIX_PAIRING_ROOMS),
    ("m082_hook_rates", M082_HOOK_RATES),
    ("m083_chat_document_sources", M083_CHAT_DOCUMENT_SOURCES),
    ("m084_memory_drop_nearby", M084_MEMORY_DROP_NEARBY),
    ("m085_runs_past_9999", M085_RUNS_PAST_9999),
    ("m086_watch_cap_lifted", M086_WATCH_CAP_LIFTED),
    ("m087_usage_estimates_audio", M087_USAGE_ESTIMATES_AUDIO),
    ("m088_sent_notices", M088_SENT_NOTICES),
    ("m089_workflow_retries", M089_WORKFLOW_RETRIES),
]


Migrations = Sequence["Migration | tuple[str, str]"]


def _steps(migrations: Migrations | None) -> list[Migration]:
    found = [m if isinstance(m, Migration) else Migration(*m) for m in (migrations or MIGRATIONS)]
    names = [m.name for m in found]
    if len(set(names)) != len(names):
        raise ValueError(f"two migrations share a name: {sorted(names)}")
    return found


def apply_migrations(conn: Any, migrations: Migrations | None = None) -> list[str]:
    """Apply every migration not yet recorded, each in its own transaction; return the names
    of those that ran. Without a list, the core's (`agentd.channels.migrations()` adds the
    channels')."""
    steps = _steps(migrations)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL)"
    )
    done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
    applied = []
    for step in steps:
        if step.name in done:
            continue
        if step.formerly and step.formerly in done:
            _adopt(conn, step)
            continue
        if _apply(conn, step):
            applied.append(step.name)
    return applied


def _adopt(conn: Any, step: Migration) -> None:
    """A step recorded under its former name (the core list ran it): the row takes its name."""
    with conn:
        conn.execute(
            "UPDATE schema_migrations SET name = ? WHERE name = ? AND NOT EXISTS "
            "(SELECT 1 FROM schema_migrations WHERE name = ?)",
            (step.name, step.formerly, step.name),
        )


def _apply(conn: Any, step: Migration) -> bool:
    """Run one step and record it in one transaction; False if another process just did."""
    name = step.name.replace("'", "''")
    # executescript commits first, so the BEGIN/COMMIT is written into the script itself.
    try:
        conn.executescript(
            f"BEGIN IMMEDIATE;\n{step.sql}\n"
            "INSERT INTO schema_migrations (name, applied_at) "
            f"VALUES ('{name}', {time.time()});\nCOMMIT;"
        )
    except Exception:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        # Another process (the daemon starting while a CLI command writes) may have applied
        # it between our read and our write: that is success, not an error.
        found = conn.execute(
            "SELECT 1 FROM schema_migrations WHERE name IN (?, ?)", (step.name, step.formerly)
        ).fetchone()
        if found:
            return False
        raise
    return True


def pending(conn: Any, migrations: Migrations | None = None) -> list[str]:
    """Names of migrations a database still needs (for read-only CLI checks)."""
    try:
        done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
    except Exception:
        done = set()
    return [m.name for m in _steps(migrations) if not {m.name, m.formerly} & done]
