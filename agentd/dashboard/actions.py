"""Changes made from the dashboard: each calls the function the same CLI command calls, with
`by` naming the dashboard, inside one transaction, so it is audited the same way."""

from __future__ import annotations

import time
from typing import Any

from agentd.access import approvals
from agentd.durable import InstanceNotFound, store
from agentd.ledger import audit

BY = "dashboard"


class Refused(ValueError):
    """A change that cannot be made; the message says why, for the owner."""


def decide(conn: Any, approval_id: str, approve: bool, reason: str | None) -> str:
    """As `agentd approve|deny` and a press in the owner's chat: approvals.decide."""
    result = approvals.decide(conn, approval_id, approve=approve, by=BY, reason=reason or None)
    if not result.ok:
        raise Refused(result.message)
    return result.message


def approve_always(conn: Any, approval_id: str) -> str:
    """As the card's "Always allow this" button: approve, and store the offered shell rule."""
    from agentd.hands import rules

    said = rules.approve_always(conn, approval_id, BY)
    if not said.startswith("Approved"):
        raise Refused(said)
    return said


def forget_memory(conn: Any, memory_id: int) -> str:
    """As `agentd memory forget ID`."""
    from agentd.memory.store import forget

    if not forget(conn, memory_id):
        raise Refused(f"There is no memory {memory_id}.")
    audit.record(conn, "memory_forgotten", detail={"memory": memory_id, "by": BY})
    return f"Forgot memory {memory_id}."


def set_schedule(conn: Any, schedule_id: str, state: str) -> str:
    """As `agentd schedule pause|resume|cancel`."""
    from agentd.schedule import store as sched_store

    try:
        sched = sched_store.get(conn, schedule_id)
        if state == "active" and sched.state == "active":
            raise Refused(f"{schedule_id} is not paused.")
        sched_store.set_state(conn, sched, state, time.time(), by=BY)  # type: ignore[arg-type]
    except (sched_store.NotFound, ValueError) as exc:
        raise Refused(str(exc)) from None
    return f"Schedule {schedule_id}: {state}."


def retry(conn: Any, instance_id: str) -> str:
    """As `agentd workflows retry ID`."""
    try:
        store.reset_for_retry(conn, instance_id, time.time())
    except (InstanceNotFound, ValueError) as exc:
        raise Refused(str(exc)) from None
    return f"{instance_id}: queued; the running daemon picks it up within a second."


def cancel(conn: Any, instance_id: str) -> str:
    """As `agentd workflows cancel ID`."""
    try:
        before = store.get_instance(conn, instance_id).status
        if before in store.FINAL_STATUSES:
            raise Refused(f"{instance_id} already finished ({before}).")
        status = store.request_cancel(conn, instance_id, time.time())
    except InstanceNotFound as exc:
        raise Refused(str(exc)) from None
    return f"{instance_id}: {status.replace('_', ' ')}."


def remove_rule(conn: Any, rule_id: int) -> str:
    """As `agentd rules rm ID` (hands.rules.remove_rule audits it)."""
    from agentd.hands import rules

    removed = rules.remove_rule(conn, rule_id, BY)
    if removed is None:
        raise Refused(f"There is no rule {rule_id}.")
    return f"Rule {rule_id} removed: matching commands ask again."
