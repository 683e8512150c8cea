"""Hosts a fetch may reach without asking, even with outside content in view.

After outside content, `fetch_url` asks for every URL the user did not write (tools/fetch.py).
The card offers "Always allow <host>": pressed by an approver, it approves the call and stores
a rule, so later fetches from that host run at once. Rules are listed and removed with
`agentd rules ls|rm` (a host rule's id is `h<n>`), and every change is audited. A rule names
one host exactly (no subdomains): the owner trusts that server with whatever a URL carries, and
only in the card's own chat for the card's own user (a rule pressed in the owner's private chat
does not open the host to a group's turns or to a paired user's). A fetch a rule let through
follows a redirect only while it stays on the host (tools/fetch.py). A rule covers fetch_url
only: the browser follows redirects and runs scripts that no fetch card showed, so in a
tainted turn it still asks for the host (browser/tools.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from agentd.access import approvals
from agentd.chat.names import chat_actor
from agentd.ledger import audit

CALLBACK_PREFIX = "ah"


class HostRule(BaseModel):
    id: int
    host: str
    chat_id: int
    user_id: int
    created_at: float
    created_by: str
    approval_id: str | None = None


_COLUMNS = "id, host, chat_id, user_id, created_at, created_by, approval_id"


def _rule(row: Any) -> HostRule:
    return HostRule.model_validate(dict(zip(_COLUMNS.split(", "), row, strict=True)))


def list_rules(conn: Any) -> list[HostRule]:
    return [_rule(r) for r in conn.execute(f"SELECT {_COLUMNS} FROM fetch_host_rules ORDER BY id")]


def allowed_hosts(conn: Any, chat_id: int | None, user_id: int | None) -> list[str]:
    """The hosts allowed in this chat for this user (None: unknown, then none)."""
    rows = conn.execute(
        "SELECT host FROM fetch_host_rules WHERE chat_id = ? AND user_id = ?", (chat_id, user_id)
    )
    return [r[0] for r in rows]


def add_rule(
    conn: Any, host: str, chat_id: int, user_id: int, by: str, approval_id: str | None
) -> HostRule:
    now = time.time()
    conn.execute(
        "INSERT OR IGNORE INTO fetch_host_rules "
        "(host, chat_id, user_id, created_at, created_by, approval_id) VALUES (?, ?, ?, ?, ?, ?)",
        (host, chat_id, user_id, now, by, approval_id),
    )
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM fetch_host_rules WHERE host = ? AND chat_id = ? AND user_id = ?",
        (host, chat_id, user_id),
    )
    rule = _rule(row.fetchone())
    detail = {
        "rule": rule.id,
        "host": host,
        "chat": chat_id,
        "user": user_id,
        "by": by,
        "approval": approval_id,
    }
    audit.record(conn, "host_rule_added", detail=detail, at=now)
    return rule


def remove_rule(conn: Any, rule_id: int, by: str) -> HostRule | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM fetch_host_rules WHERE id = ?", (rule_id,))
    found = row.fetchone()
    if found is None:
        return None
    rule = _rule(found)
    conn.execute("DELETE FROM fetch_host_rules WHERE id = ?", (rule_id,))
    audit.record(conn, "host_rule_removed", detail={"rule": rule.id, "host": rule.host, "by": by})
    return rule


# -- "Always allow <host>" ------------------------------------------------------------------


def offer(conn: Any, approval_id: str, host: str) -> None:
    """Remember the host the card's third button would allow (the approval stores no URL)."""
    conn.execute(
        "INSERT OR IGNORE INTO fetch_host_offers (approval_id, host) VALUES (?, ?)",
        (approval_id, host),
    )


def offered(conn: Any, approval_id: str) -> str | None:
    row = conn.execute(
        "SELECT host FROM fetch_host_offers WHERE approval_id = ?", (approval_id,)
    ).fetchone()
    return str(row[0]) if row else None


def callback_data(approval_id: str) -> str:
    return f"{CALLBACK_PREFIX}:{approval_id}"


def approve_always(conn: Any, approval_id: str, by: str) -> str:
    """Approve the pending call and store its host rule, in one transaction; the answer."""
    host = offered(conn, approval_id)
    if host is None:
        return "This button is not recognised."
    asked = approvals.get(conn, approval_id)
    decided = approvals.decide(conn, approval_id, approve=True, by=by)
    if not decided.ok:
        return decided.message
    if asked is None or asked.user_id is None:  # no one to scope it to: approve the one call
        return "Approved (this once: the request names no user to allow the host for)."
    add_rule(conn, host, asked.chat_id, asked.user_id, by, approval_id)
    return (
        f"Approved, and from now on fetch_url reads {host} without asking, in this chat "
        "for this user (the browser still asks)."
    )


def callback_handler(may_approve: Callable[[int], bool]) -> Callable[[Any, Any], str]:
    """The "Always allow <host>" button, inside the intake transaction, with the very check
    of the Approve / Deny buttons (an approver, on the card itself), refused and audited
    otherwise."""

    def handle(conn: Any, press: Any) -> str:
        approval_id = press.data.split(":", 1)[1] if ":" in press.data else ""
        if offered(conn, approval_id) is None:
            return "This button is not recognised."
        refused = approvals.check_press(conn, press, approval_id, may_approve)
        if refused is not None:
            return refused
        return approve_always(conn, approval_id, chat_actor(press.user_id))

    return handle
