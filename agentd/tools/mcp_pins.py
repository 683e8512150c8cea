"""The owner's confirmation of what each MCP server puts in front of the model.

An MCP server's tool names, descriptions and input schemas are its author's words, and they
sit in every model request: they steer every turn the way the owner's own instructions do.
So they are treated as the owner's only once the owner has read them: `agentd mcp trust NAME`
connects, shows every tool whole (as the model will read it) and pins the hash of exactly that
text. The daemon offers a server's tools only while what the server lists hashes to the pin;
a new or changed listing is held back (none of its tools is offered) until the owner confirms
it again. Each function takes a connection (sync); the daemon runs them through its Database.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from agentd.ledger import audit
from agentd.tools.base import Tool


class ListedTool(BaseModel):
    """One tool as the model reads it: its name, its description and its arguments' schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


class McpPin(BaseModel):
    server: str
    digest: str
    listing: list[ListedTool]
    confirmed_at: float
    # What the daemon last found instead, while held back ("" when it matched).
    seen_digest: str = ""


def listed(tools: Sequence[Tool]) -> list[ListedTool]:
    """The text a server's tools put in front of the model, in name order."""
    found = [
        ListedTool(name=t.name, description=t.description, input_schema=t.input_schema)
        for t in tools
    ]
    return sorted(found, key=lambda t: t.name)


def digest(listing: Sequence[ListedTool]) -> str:
    canonical = json.dumps(
        [t.model_dump() for t in listing], sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _pin(row: Any) -> McpPin:
    data = dict(row)
    data["listing"] = json.loads(data["listing"])
    return McpPin.model_validate(data)


def pins(conn: Any) -> dict[str, McpPin]:
    rows = conn.execute("SELECT * FROM mcp_pins ORDER BY server").fetchall()
    return {row["server"]: _pin(row) for row in rows}


def confirm(conn: Any, server: str, listing: Sequence[ListedTool], now: float) -> str:
    """The owner read this listing whole: pin its hash. Returns the digest."""
    pinned = digest(listing)
    body = json.dumps([t.model_dump() for t in listing], ensure_ascii=False)
    conn.execute(
        "INSERT INTO mcp_pins (server, digest, listing, confirmed_at, seen_digest) "
        "VALUES (?, ?, ?, ?, '') ON CONFLICT (server) DO UPDATE SET digest = excluded.digest, "
        "listing = excluded.listing, confirmed_at = excluded.confirmed_at, seen_digest = ''",
        (server, pinned, body, now),
    )
    audit.record(
        conn,
        "mcp_trusted",
        at=now,
        detail={"server": server, "hash": pinned, "tools": len(listing)},
    )
    return pinned


def held_back(conn: Any, server: str, seen: str, now: float) -> None:
    """Note what the daemon found instead of the pin (for `agentd mcp ls` and the doctor)."""
    conn.execute("UPDATE mcp_pins SET seen_digest = ? WHERE server = ?", (seen, server))
    audit.record(conn, "mcp_held", at=now, detail={"server": server, "hash": seen})


def verdict(pin: McpPin | None, found: str) -> str:
    """Why a server's listing is held back ("" when the owner confirmed exactly this)."""
    if pin is None:
        return "its tool descriptions were never confirmed"
    if pin.digest != found:
        return "its tool descriptions changed since you confirmed them"
    return ""
