"""Rows for the dashboard's tests and benchmark, written through the real schema and, where
they exist, the functions the daemon itself writes with."""

from __future__ import annotations

import json
from typing import Any

from agentd.access import approvals
from agentd.durable import store
from agentd.ledger import audit
from agentd.memory.history import save_message, withdraw

OWNER = 1001
CHAT = 1001


def turn(
    conn: Any, n: int, at: float, text: str, *, status: str = "complete", chat: int = CHAT
) -> str:
    """One turn: instance, journal (three steps), two model calls, its messages, an audit row."""
    iid = f"tg-update-{n}"
    store.insert_instance(
        conn, instance_id=iid, workflow="turn", key=f"chat-{chat}", input_json="{}", now=at
    )
    conn.execute(
        "UPDATE workflow_instances SET status = ?, input = ?, finished_at = ?, error = ? "
        "WHERE id = ?",
        (
            status,
            json.dumps({"text": text, "chat_id": chat}),
            None if status in store.OPEN_STATUSES else at + 2,
            "model kept failing" if status == "errored" else None,
            iid,
        ),
    )
    for ordinal, name in enumerate(("load-context", "llm#1", "send-reply")):
        store.record_step(
            conn,
            iid,
            ordinal,
            name,
            delivery="at_least_once",
            attempt=1,
            started_at=at + ordinal * 0.1,
            now=at + ordinal * 0.1 + 0.05,
            result="null",
        )
    for step in ("llm#1", "llm#2"):
        conn.execute(
            "INSERT INTO llm_usage (at, instance_id, step, attempt, chat_id, purpose, model, "
            "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, user_id) "
            "VALUES (?, ?, ?, 1, ?, ?, 'claude-haiku-4-5', ?, ?, ?, ?, ?)",
            (at, iid, step, chat, "turn", 800 + n % 300, 200, 6000, 300, OWNER),
        )
    key = f"dash-{n}"
    save_message(
        conn,
        chat_id=chat,
        user_id=OWNER,
        role="user",
        content=text,
        source_key=key + "u",
        instance_id=iid,
        created_at=at,
    )
    save_message(
        conn,
        chat_id=chat,
        user_id=None,
        role="assistant",
        content=f"Answer: {text}",
        source_key=key + "a",
        instance_id=iid,
        created_at=at + 2,
    )
    audit.record(
        conn, "turn", chat_id=chat, user_id=OWNER, instance_id=iid, at=at + 2, detail={"steps": 3}
    )
    return iid


def waiting_approval(conn: Any, n: int, at: float, tool: str, argument: str) -> str:
    """A turn waiting for the owner's decision on a high-risk call."""
    iid = turn(conn, n, at, f"please run {argument}", status="waiting")
    conn.execute("UPDATE workflow_instances SET waiting_for = ? WHERE id = ?", ("approval", iid))
    approval_id = approvals.new_id()
    approvals.create(
        conn,
        approvals.Approval(
            id=approval_id,
            instance_id=iid,
            tool_use_id=f"tu-{n}",
            chat_id=CHAT,
            chat_kind="private",
            user_id=OWNER,
            tool=tool,
            risk="high",
            args_digest="d",
            args_preview=argument,
            status="pending",
            created_at=at,
            expires_at=at + 3600 * 24 * 365,
            call_json=approvals.canonical_call(tool, {"path": argument}),
            tool_source="builtin",
            why=f"writes {argument}",
            card_chat_id=CHAT,
        ),
    )
    return approval_id


def memory(conn: Any, at: float, content: str, source: str) -> None:
    conn.execute(
        "INSERT INTO memories (user_id, kind, content, source, chat_id, created_at, updated_at) "
        "VALUES (?, 'fact', ?, ?, ?, ?, ?)",
        (OWNER, content, source, CHAT, at, at),
    )


def schedule(conn: Any, sid: str, at: float, text: str) -> None:
    recurrence = {"kind": "interval", "timezone": "UTC", "anchor": int(at), "every": 86400}
    conn.execute(
        "INSERT INTO schedules (id, user_id, chat_id, action, text, recurrence, timezone, "
        "catch_up, state, next_run, created_at, updated_at, created_by) "
        "VALUES (?, ?, ?, 'prompt', ?, ?, 'UTC', 'skip', 'active', ?, ?, ?, 'test')",
        (sid, OWNER, CHAT, text, json.dumps(recurrence), at + 86400, at, at),
    )


def watch(conn: Any, wid: str, at: float, text: str) -> None:
    """A watch whose label and condition carry outside text, with one told check."""
    from agentd.config import Config
    from agentd.watch import store as watch_store
    from agentd.watch.create import WatchRequest, create, timing
    from agentd.watch.model import Source

    req = WatchRequest(
        label=f"watch {text}",
        condition=f"condition {text}",
        source=Source(kind="page", url="https://shop.example/x"),
        every="1h",
    )
    w, _ = create(
        conn,
        req,
        timing(req, now=at, config=Config()),
        watch_id=wid,
        user_id=OWNER,
        chat_id=CHAT,
        chat_kind="private",
        now=at,
        config=Config(),
        by="test",
    )
    watch_store.record_check(conn, w, int(at), "told", at, tokens=700)


def skill(conn: Any, name: str, description: str, at: float) -> None:
    conn.execute(
        "INSERT INTO skills (name, path, description, content_hash, status, source, "
        "confirmed_at) VALUES (?, '/tmp/skill', ?, 'h', 'enabled', ?, ?)",
        (name, description, description, at),
    )


def hostile_everything(conn: Any, now: float, text: str) -> str:
    """One of every kind of row, each carrying `text` where outside content would land;
    returns the waiting approval's id."""
    turn(conn, 1, now - 60, f"mail subject: {text}")
    withdrawn = turn(conn, 2, now - 50, f"page title: {text}")
    withdraw(conn, [withdrawn], "edited")
    replacement = turn(conn, 5, now - 45, f"page title, edited: {text}")
    conn.execute(
        "UPDATE workflow_instances SET input = json_set(input, '$.edited', json('true')) "
        "WHERE id = ?",
        (replacement,),
    )
    turn(conn, 3, now - 40, f"file name: {text}", status="errored")
    memory(conn, now - 30, f"memory: {text}", f"mail from {text}")
    schedule(conn, "s1", now - 20, f"remind {text}")
    watch(conn, "w1", now - 15, text)
    skill(conn, "demo", f"skill {text}", now - 10)
    audit.record(conn, "tool_call", chat_id=CHAT, detail={"tool": text}, at=now - 5)
    return waiting_approval(conn, 4, now - 1, "write_file", text)
