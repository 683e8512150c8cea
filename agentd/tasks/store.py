"""Tasks as the journal has them: listing with progress and cost, and cancelling a task with
every task it started (plain functions of a connection: the daemon and the CLI share them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from agentd.chat.names import TASK_WORKFLOW
from agentd.durable import store
from agentd.ledger import usage
from agentd.ledger.pricing import ModelPrice, cost, price_for


class TaskRow(BaseModel):
    id: str
    chat_id: int
    user_id: int
    parent: str
    text: str
    status: str
    model_calls: int  # finished llm steps: its progress
    max_steps: int
    tokens: int
    token_budget: int
    cost_usd: float
    created_at: float


def _progress(conn: Any, instance_id: str) -> int:
    row = conn.execute(
        "SELECT COUNT(*) FROM workflow_steps WHERE instance_id = ? AND name LIKE 'llm#%' "
        "AND status = 'complete'",
        (instance_id,),
    ).fetchone()
    return int(row[0])


def _row(conn: Any, inst: store.InstanceRecord, prices: Mapping[str, ModelPrice]) -> TaskRow:
    inp = json.loads(inst.input)
    spent = usage.totals(conn, instance_prefix=inst.id)
    tokens = sum(
        t.input_tokens + t.output_tokens + t.cache_read_tokens + t.cache_write_tokens for t in spent
    )
    return TaskRow(
        id=inst.id,
        chat_id=inp["chat_id"],
        user_id=inp["user_id"],
        parent=inp["parent"],
        text=inp["text"],
        status=inst.status,
        model_calls=_progress(conn, inst.id),
        max_steps=inp["max_steps"],
        tokens=tokens,
        token_budget=inp["token_budget"],
        cost_usd=sum(cost(t, price_for(t.model, prices)) for t in spent),
        created_at=inst.created_at,
    )


def list_tasks(
    conn: Any,
    *,
    chat_id: int | None = None,
    open_only: bool = False,
    prices: Mapping[str, ModelPrice] | None = None,
    limit: int = 50,
) -> list[TaskRow]:
    """Newest first."""
    where, params = "workflow = ?", [TASK_WORKFLOW]
    if chat_id is not None:
        where += " AND json_extract(input, '$.chat_id') = ?"
        params.append(chat_id)
    if open_only:
        where += f" AND status IN {store.OPEN_STATUSES!r}"
    rows = conn.execute(
        f"SELECT * FROM workflow_instances WHERE {where} ORDER BY seq DESC LIMIT ?",
        (*params, limit),
    ).fetchall()
    insts = [store.InstanceRecord.model_validate(dict(r)) for r in rows]
    return [_row(conn, i, prices or {}) for i in insts]


def open_count(conn: Any, chat_id: int) -> int:
    row = conn.execute(
        f"SELECT COUNT(*) FROM workflow_instances WHERE workflow = ? AND status IN "
        f"{store.OPEN_STATUSES!r} AND json_extract(input, '$.chat_id') = ?",
        (TASK_WORKFLOW, chat_id),
    ).fetchone()
    return int(row[0])


def descendants(conn: Any, instance_id: str) -> list[str]:
    """The tasks started by this instance, and by those, and so on."""
    rows = conn.execute(
        "WITH RECURSIVE tree(id) AS (SELECT id FROM workflow_instances WHERE workflow = ? "
        "AND json_extract(input, '$.parent') = ? UNION SELECT w.id FROM workflow_instances w "
        "JOIN tree ON json_extract(w.input, '$.parent') = tree.id WHERE w.workflow = ?) "
        "SELECT id FROM tree",
        (TASK_WORKFLOW, instance_id, TASK_WORKFLOW),
    ).fetchall()
    return [r[0] for r in rows]


def cancel_tree(conn: Any, instance_id: str, now: float) -> list[str]:
    """Ask the engine to cancel the instance and every task under it; returns the ids whose
    cancel was requested (or done, for those that had not started)."""
    done = []
    for iid in [instance_id, *descendants(conn, instance_id)]:
        inst = store.find_instance(conn, iid)
        if inst is None or inst.status in store.FINAL_STATUSES:
            continue
        store.request_cancel(conn, iid, now)
        done.append(iid)
    return done
