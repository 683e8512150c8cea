"""Changes made from the dashboard: each calls the function the same CLI command calls, with
`by` naming the dashboard, inside one transaction, so it is audited the same way."""

from __future__ import annotations

import time
from typing import Any

from agentd.access import approvals
from agentd.durable import InstanceNotFound, store

BY = "dashboard"
# The longest memory text the page's form takes (its textarea says the same).
MEMORY_CHARS = 4000


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
    """As `agentd memory forget ID` (kept in its history: restore brings it back)."""
    from agentd.memory import manage

    try:
        manage.forget_one(conn, memory_id, by=BY)
    except manage.MemoryNotFound:
        raise Refused(f"There is no memory {memory_id}.") from None
    return f"Forgot memory {memory_id}."


def pin_memory(conn: Any, memory_id: int, pinned: bool) -> str:
    """As `agentd memory pin ID [--off]`."""
    from agentd.memory import manage

    try:
        manage.set_pinned(conn, memory_id, pinned, by=BY)
    except manage.MemoryNotFound:
        raise Refused(f"There is no memory {memory_id}.") from None
    return f"{'Pinned' if pinned else 'Unpinned'} memory {memory_id}."


async def edit_memory(access: Any, embedder: Any, memory_id: int, text: str) -> str:
    """As `agentd memory edit ID TEXT`: re-embedded, then written through `access` (the
    daemon's writer when it serves the dashboard)."""
    from agentd.memory import manage

    if len(text) > MEMORY_CHARS:
        # Cut short, the memory would silently say less than the owner wrote.
        raise Refused(
            f"A memory is at most {MEMORY_CHARS} characters and this edit has {len(text)}: "
            "nothing was changed; shorten it, or split it into memories of its own."
        )
    try:
        await manage.edit(access, embedder, memory_id, text, user_id=None, by=BY)
    except manage.MemoryStoreError as exc:
        raise Refused(str(exc)) from None
    return f"Memory {memory_id} now reads: {' '.join(text.split())[:200]}"


async def restore_memory(access: Any, embedder: Any, memory_id: int, version: int) -> str:
    """As `agentd memory restore ID VERSION`."""
    from agentd.memory import manage

    try:
        await manage.restore(access, embedder, memory_id, version, user_id=None, by=BY)
    except manage.MemoryStoreError as exc:
        raise Refused(str(exc)) from None
    return f"Memory {memory_id} restored to version {version}."


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


def set_watch(conn: Any, watch_id: str, state: str) -> str:
    """As `agentd watch pause|resume|rm`."""
    from agentd.watch import store as watch_store

    try:
        w = watch_store.get(conn, watch_id)
        if state == "active" and w.state == "active" and not w.capped_day:
            raise Refused(f"{watch_id} is neither paused nor capped.")
        watch_store.set_state(conn, w, state, time.time(), by=BY)  # type: ignore[arg-type]
    except watch_store.NotFound as exc:
        raise Refused(str(exc)) from None
    return f"Watch {watch_id}: {state}."


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
