"""What each page shows, read through the library functions the CLI commands use.

Every function takes a plain sqlite connection (the server runs it off the event loop) and
returns plain data for a template. Nothing here writes: changes live in actions.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from agentd.access import approvals
from agentd.dashboard import spend
from agentd.durable import store
from agentd.ledger import audit as audit_log
from agentd.ledger.pricing import ModelPrice, Tokens, cost, price_for
from agentd.memory.history import history

DAY = 86400.0


def _day_start(now: float) -> float:
    return now - now % DAY


def health(conn: Any, now: float, schema: list[Any] | None = None) -> list[dict[str, Any]]:
    """The checks `agentd doctor` makes that need only the database: cheap enough per view.
    `schema`: every migration the database should have, channels' included."""
    from agentd.db.migrations import pending

    checks = []
    missing = pending(conn, schema)
    checks.append(
        {
            "name": "database schema",
            "ok": not missing,
            "detail": "up to date" if not missing else f"{len(missing)} migrations to apply",
        }
    )
    running = conn.execute("SELECT value FROM kv WHERE key = 'engine.running'").fetchone()
    errored = conn.execute(
        "SELECT COUNT(*) FROM workflow_instances WHERE status = 'errored' AND updated_at > ?",
        (now - DAY,),
    ).fetchone()[0]
    checks.append(
        {
            "name": "workflows (24 h)",
            "ok": errored == 0,
            "detail": f"{errored} errored" if errored else "none errored",
        }
    )
    checks.append(
        {
            "name": "daemon",
            "ok": running is not None,
            "detail": "running" if running else "not running (start it with `agentd run`)",
        }
    )
    return checks


def open_instances(conn: Any, limit: int = 20) -> list[store.InstanceRecord]:
    rows = conn.execute(
        "SELECT * FROM workflow_instances WHERE status NOT IN ('complete', 'errored', "
        "'cancelled') ORDER BY seq DESC LIMIT ?",
        (limit,),
    ).fetchall()
    names = _instance_columns(conn)
    return [store.InstanceRecord.model_validate(dict(zip(names, r, strict=True))) for r in rows]


def _instance_columns(conn: Any) -> list[str]:
    return [r[1] for r in conn.execute("PRAGMA table_info(workflow_instances)")]


def last_errors(conn: Any, limit: int = 5) -> list[store.InstanceRecord]:
    return store.list_instances(conn, status="errored", limit=limit)


def _tokens(r: Mapping[str, Any]) -> Tokens:
    return Tokens(**{f: r[f] for f in Tokens.model_fields})


_SUMS = (
    "SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens, "
    "SUM(cache_read_tokens) AS cache_read_tokens, SUM(cache_write_tokens) AS cache_write_tokens, "
    "SUM(cache_write_1h_tokens) AS cache_write_1h_tokens, "
    "SUM(audio_seconds) AS audio_seconds, COUNT(*) AS calls"
)


# A bot in many groups has a chat each: the page lists the most recent, not every one.
CHATS_SHOWN = 200


def chats(conn: Any, limit: int = CHATS_SHOWN) -> list[dict[str, Any]]:
    """Chats, the most recently active first, at most `limit` (older ones stay reachable at
    /conversations/ID and through the Audit page's chat filter). MAX(id) is read from the
    (chat_id, id) index alone; the time of that one message is then looked up."""
    cur = conn.execute(
        "SELECT c.chat_id, m.created_at FROM (SELECT chat_id, MAX(id) AS last FROM messages "
        "GROUP BY chat_id) c JOIN messages m ON m.id = c.last ORDER BY c.last DESC LIMIT ?",
        (limit,),
    )
    return [{"chat_id": r[0], "last": r[1]} for r in cur.fetchall()]


def conversation(conn: Any, chat_id: int, limit: int = 100) -> dict[str, Any]:
    """The chat's last messages (`agentd history --chat`) and which turns answered an edit:
    their input says so (TurnInput.edited); the text they replaced is marked withdrawn."""
    messages = history(conn, chat_id=chat_id, limit=limit)
    ids = sorted({m.instance_id for m in messages if m.instance_id})
    edited: set[str] = set()
    if ids:
        marks = ", ".join("?" * len(ids))
        edited = {
            r[0]
            for r in conn.execute(
                f"SELECT id FROM workflow_instances WHERE id IN ({marks}) "
                "AND json_extract(input, '$.edited') = 1",
                ids,
            )
        }
    return {"messages": messages, "edited": edited}


def timeline(conn: Any, instance_id: str) -> dict[str, Any] | None:
    """One turn as `agentd workflows show` sees it, with its model calls and approvals."""
    inst = store.find_instance(conn, instance_id)
    if inst is None:
        return None
    steps = store.load_steps(conn, instance_id)
    attempts: dict[int, list[Any]] = {}
    for a in store.load_attempts(conn, instance_id):
        attempts.setdefault(a.ordinal, []).append(a)
    cur = conn.execute(
        f"SELECT step, attempt, purpose, model, {_SUMS} FROM llm_usage WHERE instance_id = ? "
        "GROUP BY id ORDER BY id",
        (instance_id,),
    )
    names = [d[0] for d in cur.description]
    calls = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    for c in calls:
        c["usd"] = cost(_tokens(c), price_for(c["model"]))
    asked = conn.execute(
        "SELECT id FROM approvals WHERE instance_id = ? ORDER BY created_at", (instance_id,)
    ).fetchall()
    found = [approvals.get(conn, r[0]) for r in asked]
    return {
        "instance": inst,
        "steps": [(s, attempts.get(s.ordinal, []), _taint(s)) for s in steps.values()],
        "tools": tool_calls(list(steps.values()), found),
        "calls": calls,
        "approvals": found,
        "input": _pretty(inst.input),
    }


def _result(step: store.StepRecord) -> dict[str, Any]:
    try:
        found = json.loads(step.result or "null")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _taint(step: store.StepRecord) -> str:
    """What outside content a routed tool call brings into the turn, when its route says so."""
    result = _result(step) if step.name.startswith("route:") else {}
    return f"{result.get('name', 'a tool')}'s result" if result.get("taints") else ""


def tool_calls(steps: list[store.StepRecord], asked: list[Any]) -> list[dict[str, Any]]:
    """Each tool call of a turn from its journal: the route (tool, risk, source, why), the
    approval asked for it and the outcome. Read leniently: an older journal may lack a field."""
    by_use = {a.tool_use_id: a for a in asked if a is not None}
    outcomes = {s.name.split(":", 1)[1]: s for s in steps if s.name.startswith("tool:")}
    calls = []
    for step in steps:
        if not step.name.startswith("route:"):
            continue
        use_id = step.name.split(":", 1)[1]
        route, ran = _result(step), outcomes.get(use_id)
        outcome = _result(ran) if ran is not None else {}
        approval = by_use.get(use_id)
        calls.append(
            {
                "tool": route.get("name", "?"),
                "risk": route.get("risk") or "unknown tool",
                "source": route.get("source", ""),
                "why": route.get("reason", ""),
                "taints": bool(route.get("taints")),
                "approval": approval.status if approval else "",
                "decided_by": approval.decided_by if approval else "",
                "outcome": _outcome(ran, outcome),
                "result": str(outcome.get("content", ""))[:300],
            }
        )
    return calls


def _outcome(step: store.StepRecord | None, outcome: dict[str, Any]) -> str:
    if step is None:
        return "not run"
    if step.status != "complete":
        return step.status
    if outcome.get("ok") is False:
        return f"error ({outcome.get('error_kind') or 'failed'})"
    return "ok"


def _pretty(text: str | None) -> str:
    try:
        return json.dumps(json.loads(text or "null"), indent=2, ensure_ascii=False)
    except ValueError:
        return text or ""


def approvals_page(conn: Any, now: float) -> dict[str, Any]:
    from agentd.hands import rules

    decided = conn.execute(
        "SELECT id FROM approvals WHERE status != 'pending' ORDER BY decided_at DESC LIMIT 50"
    ).fetchall()
    waiting = approvals.pending(conn, now)
    return {
        "waiting": waiting,
        # The shell rule the card's "Always allow this" would add, where it offers one.
        "offers": {a.id: offer for a in waiting if (offer := rules.offered(conn, a.id))},
        "decided": [approvals.get(conn, r[0]) for r in decided],
        "rules": rules.list_rules(conn),
    }


def memories(conn: Any, query: str, limit: int = 100) -> list[Any]:
    """Newest first, or the keyword matches (FTS, as `agentd memory search --mode keyword`)."""
    from agentd.memory.store import get_memories, list_memories

    if not query.strip():
        return list_memories(conn, None, limit=limit)
    # FTS5 ends a string at a NUL ("unterminated string"); nobody searches for one.
    phrase = '"' + query.replace("\x00", "").replace('"', '""') + '"'
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rank LIMIT ?",
            (phrase, limit),
        )
    ]
    found = get_memories(conn, ids)
    return [found[i] for i in ids if i in found]


def memory_history(conn: Any, memory_id: int) -> dict[str, Any] | None:
    """One memory (None when forgotten) and its versions, oldest first; None: no such memory
    now or ever."""
    from agentd.memory import manage
    from agentd.memory.store import get_memory

    try:
        versions = manage.history(conn, memory_id)
    except manage.MemoryNotFound:
        return None
    return {"memory_id": memory_id, "memory": get_memory(conn, memory_id), "versions": versions}


def schedules(conn: Any) -> list[tuple[Any, list[Any]]]:
    from agentd.schedule import store as sched_store

    found = sched_store.list_schedules(
        conn, user_id=None, states=("active", "paused", "done", "cancelled")
    )
    return [(s, sched_store.runs(conn, s.id, limit=5)) for s in found[:100]]


def watches(conn: Any, prices: Any) -> list[dict[str, Any]]:
    """Each watch with its checks, silences, messages and cost (as `agentd watch ls`)."""
    from agentd.ledger.usage import report, totals
    from agentd.watch import store as watch_store

    out = []
    for w in watch_store.list_watches(conn)[:100]:
        spent = report(totals(conn, instance_prefix=f"sched-{w.id}-"), prices)
        out.append(
            {
                "watch": w,
                "stats": watch_store.stats(conn, w.id),
                "usd": sum(r.estimated_cost_usd for r in spent),
                "checks": watch_store.checks(conn, w.id, limit=5),
            }
        )
    return out


def automation_runs(conn: Any, limit: int = 50) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT r.automation, r.version, i.id, i.status, i.created_at, i.error "
        "FROM automation_runs r JOIN workflow_instances i ON i.id = r.instance_id "
        "ORDER BY i.seq DESC LIMIT ?",
        (limit,),
    )
    keys = ("automation", "version", "instance", "status", "created_at", "error")
    return [dict(zip(keys, r, strict=True)) for r in cur.fetchall()]


def skills(conn: Any) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT name, status, source, description, scripts, confirmed_at, change_note "
        "FROM skills ORDER BY name"
    )
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def audit(
    conn: Any, kind: str | None, since: float | None, chat: int | None, limit: int = 200
) -> dict[str, Any]:
    """As `agentd audit --kind --since --chat`, newest last."""
    found = audit_log.entries(conn, since=since, kind=kind or None, chat_id=chat, limit=limit)
    return {"entries": found, "kinds": sorted(audit_log.known_kinds(conn))}


def now_page(
    conn: Any,
    now: float,
    prices: Mapping[str, ModelPrice] | None,
    daily_tokens: int,
    schema: list[Any] | None = None,
) -> dict[str, Any]:
    return {
        "health": health(conn, now, schema),
        "open": open_instances(conn),
        "errors": last_errors(conn),
        "today": spend.since(conn, _day_start(now), prices),
        "budget": daily_tokens,
        "waiting": len(approvals.pending(conn, now)),
        "at": time.time(),
    }
