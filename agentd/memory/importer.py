"""Store memories read from files (portable.py), idempotently, as outside content unless the
owner vouches for the file.

A file is anyone's words until the owner says otherwise: an OpenClaw or Hermes folder someone
sent, an "export" that says `origin: user` and `pinned: true` of text written to steer the
assistant. So by default every imported memory is outside content (recalling it taints the
turn, it never joins the prompt's facts) and `pinned` is ignored. With `mine` (the owner says
this file is theirs, for this import) the file's own provenance is kept: a memory it says came
from outside stays outside, the rest are the owner's (or the model's, where it says so), and
`pinned` is honoured for those.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from agentd.db.runner import Runner
from agentd.memory.facts import normalise_slot
from agentd.memory.manage import add_text
from agentd.memory.portable import ImportItem
from agentd.memory.store import NewMemory, embedding_text
from agentd.retrieval.embedders import Embedder

Conn = Any


class ImportReport(BaseModel):
    """What an import did: new memories, ones merged into the owner's existing text (or a
    keyed fact they superseded), and ones already imported before."""

    added: int = 0
    merged: int = 0
    superseded: int = 0
    unchanged: int = 0


def _new(item: ImportItem, user_id: int, mine: bool) -> NewMemory:
    origin = (item.origin or "user") if mine and item.origin != "outside" else "outside"
    return NewMemory(
        user_id=user_id,
        kind=item.kind,
        content=item.content,
        source="import",
        source_key=item.source_key(user_id),
        slot=normalise_slot(item.key),
        context=item.context,
        origin=origin,
        origin_ref=item.origin_ref,
        pinned=item.pinned and origin != "outside",
    )


def _known(conn: Conn, keys: list[str]) -> set[str]:
    rows = conn.execute(
        "SELECT source_key FROM memories WHERE source_key IN (SELECT value FROM json_each(?))",
        (json.dumps(keys),),
    ).fetchall()
    return {str(r[0]) for r in rows}


def store_items(
    conn: Conn,
    user_id: int,
    items: list[tuple[ImportItem, list[float] | None]],
    model_id: str | None,
    mine: bool = False,
) -> ImportReport:
    """Store the items in one transaction (the caller's); see ImportReport."""
    report = ImportReport()
    known = _known(conn, [item.source_key(user_id) for item, _ in items])
    for item, vector in items:
        if item.source_key(user_id) in known:
            report.unchanged += 1
            continue
        known.add(item.source_key(user_id))
        _, action = add_text(
            conn,
            _new(item, user_id, mine),
            vector,
            model_id,
            key=item.key,
            actor="import",
            now=item.created_at,
        )
        setattr(report, action, getattr(report, action) + 1)
    return report


async def import_items(
    db: Runner,
    embedder: Embedder | None,
    user_id: int,
    items: list[ImportItem],
    *,
    mine: bool = False,
) -> ImportReport:
    """Embed what is new, then store it all in one write."""
    keys = [item.source_key(user_id) for item in items]
    known = await db.read(lambda c: _known(c, keys))
    fresh = [item for item in items if item.source_key(user_id) not in known]
    vectors: list[list[float] | None] = [None] * len(items)
    if embedder is not None and fresh:
        embedded = await embedder.embed_documents(
            [embedding_text(item.content, item.context) for item in fresh]
        )
        by_key = {
            item.source_key(user_id): list(v) for item, v in zip(fresh, embedded, strict=True)
        }
        vectors = [by_key.get(k) for k in keys]
    model_id = embedder.model_id if embedder is not None else None
    pairs = list(zip(items, vectors, strict=True))
    return await db.write(lambda c: store_items(c, user_id, pairs, model_id, mine))
