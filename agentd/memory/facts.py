"""Facts, preferences and tasks about a user (R-LTM-2): one row per slot, newest wins.

A fact has a `key` (slot) such as `home_city` or `diet`; storing a fact whose normalised key a
user already has replaces the old text in place (same memory id, new vector) instead of piling
up contradictions; the old text is kept in the memory's versions (versions.py), where it is
never recalled and from where the owner can restore it. Facts without a key are deduplicated by
their normalised text. Each fact says whose words it is (`origin`): facts the model extracts
from the chat are "model", from outside content (a forwarded message, a document, a web page,
mail) "outside" — the caller that knows where the text came from passes it.

`ExtractedFacts` is the structured output the summariser asks the LLM for and the argument
shape of a `remember` tool; `apply_extracted_facts` stores it given the vectors, and
`remember_facts` embeds then stores in one write.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentd.db.runner import Runner
from agentd.memory.store import (
    FACT_KINDS,
    Memory,
    NewMemory,
    Origin,
    add_memory,
    get_memories,
    get_memory,
    list_memories,
    taints,
    update_content,
)
from agentd.memory.versions import Actor, record_version
from agentd.retrieval.embedders import Embedder

Conn = Any
FactKind = Literal["fact", "preference", "task"]
MAX_SLOT_CHARS = 64


class ExtractedFact(BaseModel):
    """One durable fact about the user, as the LLM states it."""

    kind: FactKind = Field(
        default="fact",
        description="fact (about the user's life), preference (likes, dislikes, how to answer), "
        "or task (something the user wants to do or be reminded of)",
    )
    key: str | None = Field(
        default=None,
        max_length=200,
        description="A short stable slot name such as home_city, employer, diet, reply_language.",
    )
    content: str = Field(
        min_length=1,
        max_length=500,
        description="One self-contained sentence in the third person, e.g. 'Lives in Lyon'.",
    )


class ExtractedFacts(BaseModel):
    """What the LLM extracts from a conversation block; retract_keys are facts now untrue."""

    facts: list[ExtractedFact] = Field(default_factory=list, max_length=50)
    retract_keys: list[str] = Field(default_factory=list, max_length=50)


class FactChange(BaseModel):
    """What storing one extracted fact did."""

    action: Literal["added", "replaced", "unchanged", "retracted"]
    memory_id: int | None
    slot: str | None
    content: str
    previous: str | None = None


def normalise_slot(key: str | None) -> str | None:
    """`"Home City "` and `"home-city"` → `home_city`; None for empty keys."""
    if not key:
        return None
    text = unicodedata.normalize("NFKC", key).casefold()
    text = re.sub(r"[^\w]+", "_", text).strip("_")
    text = re.sub(r"_+", "_", text)[:MAX_SLOT_CHARS].strip("_")
    return text or None


def norm_text(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split()).rstrip(".!")


def _find_by_slot(conn: Conn, user_id: int, slot: str) -> tuple[int, str, str] | None:
    """The fact in a slot: its id, text and origin."""
    row = conn.execute(
        "SELECT id, content, origin FROM memories WHERE user_id = ? AND slot = ?",
        (user_id, slot),
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]), str(row[2]))


def _outranked(origin: Origin, held_origin: str) -> bool:
    """Words the owner did not write (a page, a mail, a forwarded message, a file imported
    unvouched) never replace or remove a fact the owner's own conversation established: the
    summariser or a tool may have carried their instruction along."""
    return origin == "outside" and held_origin != "outside"


def _find_same_text(conn: Conn, user_id: int, kind: str, content: str) -> int | None:
    # Keyed facts too: a fact said again without its key merges into the keyed one, and so
    # leaves with it when a new value supersedes it (else the old value lingers, unkeyed).
    target = norm_text(content)
    rows = conn.execute(
        "SELECT id, content FROM memories WHERE user_id = ? AND kind = ?",
        (user_id, kind),
    ).fetchall()
    return next((int(r[0]) for r in rows if norm_text(r[1]) == target), None)


def upsert_fact(
    conn: Conn,
    user_id: int,
    fact: ExtractedFact,
    vector: Sequence[float] | None = None,
    model_id: str | None = None,
    *,
    source: str = "",
    chat_id: int | None = None,
    origin: Origin = "model",
    origin_ref: str | None = None,
    actor: Actor = "model",
    now: float | None = None,
    context: str | None = None,
    meta: dict[str, Any] | None = None,
) -> FactChange:
    """Store one fact: supersede the user's fact with the same slot (the old text kept in its
    versions), skip an identical one. `context`: when it was said (summarise.fact_context);
    `meta`: where (the messages and the summary it came from), both replaced on supersede."""
    now = time.time() if now is None else now
    content = " ".join(fact.content.split())
    slot = normalise_slot(fact.key)
    if slot is not None:
        existing = _find_by_slot(conn, user_id, slot)
        if existing is not None and _outranked(origin, existing[2]):
            # Kept beside it, unkeyed: recall finds it as outside content, the owner's stays.
            slot, existing = None, None
        if existing is not None:
            memory_id, old, _ = existing
            if norm_text(old) == norm_text(content):
                return FactChange(action="unchanged", memory_id=memory_id, slot=slot, content=old)
            update_content(
                conn,
                memory_id,
                content,
                vector,
                model_id,
                kind=fact.kind,
                source=source,
                context=context,
                origin=origin,
                origin_ref=origin_ref or source or None,
                now=now,
            )
            if meta is not None:
                conn.execute(
                    "UPDATE memories SET meta = ? WHERE id = ?", (json.dumps(meta), memory_id)
                )
            _record(conn, memory_id, "supersede", actor, old, content, now)
            return FactChange(
                action="replaced", memory_id=memory_id, slot=slot, content=content, previous=old
            )
        same = _find_same_text(conn, user_id, fact.kind, content)
        if same is not None:  # said before without a key: now it has one
            conn.execute("UPDATE memories SET slot = ? WHERE id = ? AND slot IS NULL", (slot, same))
            return FactChange(action="unchanged", memory_id=same, slot=slot, content=content)
    else:
        same = _find_same_text(conn, user_id, fact.kind, content)
        if same is not None:
            return FactChange(action="unchanged", memory_id=same, slot=None, content=content)
    memory = NewMemory(
        user_id=user_id,
        kind=fact.kind,
        content=content,
        slot=slot,
        source=source,
        chat_id=chat_id,
        context=context,
        meta=meta or {},
        origin=origin,
        origin_ref=origin_ref or source or None,
    )
    memory_id = add_memory(conn, memory, vector, model_id, now=now)
    _record(conn, memory_id, "add", actor, None, content, now)
    return FactChange(action="added", memory_id=memory_id, slot=slot, content=content)


def _record(
    conn: Conn,
    memory_id: int,
    action: Any,
    actor: Actor,
    old: str | None,
    new: str | None,
    now: float | None,
) -> None:
    memory = get_memory(conn, memory_id)
    if memory is not None:
        record_version(conn, memory, action, actor, old=old, new=new, now=now)


def retract_fact(conn: Conn, user_id: int, key: str, origin: Origin = "model") -> FactChange | None:
    """Forget the user's fact in slot `key` (row, FTS entry and vector); asked by `origin`,
    which must not be outranked by the fact's (`_outranked`)."""
    slot = normalise_slot(key)
    if slot is None:
        return None
    existing = _find_by_slot(conn, user_id, slot)
    if existing is None or _outranked(origin, existing[2]):
        return None
    _record(conn, existing[0], "forget", "model", existing[1], None, None)
    conn.execute("DELETE FROM memories WHERE id = ?", (existing[0],))
    return FactChange(action="retracted", memory_id=existing[0], slot=slot, content=existing[1])


def apply_extracted_facts(
    conn: Conn,
    user_id: int,
    extracted: ExtractedFacts,
    vectors: Sequence[Sequence[float] | None] | None = None,
    model_id: str | None = None,
    *,
    source: str = "",
    chat_id: int | None = None,
    origin: Origin = "model",
    now: float | None = None,
    contexts: Sequence[str | None] | None = None,
    metas: Sequence[dict[str, Any] | None] | None = None,
) -> list[FactChange]:
    """Store extracted facts (vectors[i], contexts[i] and metas[i] belong to facts[i]) and apply
    retractions.

    Run inside one write transaction. Later facts win over earlier ones with the same key.
    """
    if vectors is not None and len(vectors) != len(extracted.facts):
        raise ValueError(f"{len(vectors)} vectors for {len(extracted.facts)} facts")
    changes = [
        c
        for key in extracted.retract_keys
        if (c := retract_fact(conn, user_id, key, origin)) is not None
    ]
    for i, fact in enumerate(extracted.facts):
        vector = vectors[i] if vectors is not None else None
        changes.append(
            upsert_fact(
                conn,
                user_id,
                fact,
                vector,
                model_id,
                source=source,
                chat_id=chat_id,
                origin=origin,
                now=now,
                context=contexts[i] if contexts is not None else None,
                meta=metas[i] if metas is not None else None,
            )
        )
    return changes


async def remember_facts(
    db: Runner,
    embedder: Embedder,
    user_id: int,
    extracted: ExtractedFacts,
    *,
    source: str = "",
    chat_id: int | None = None,
    origin: Origin = "model",
    now: float | None = None,
) -> list[FactChange]:
    """Embed the facts (outside any transaction), then store them in one write."""
    contents = [" ".join(f.content.split()) for f in extracted.facts]
    vectors = await embedder.embed_documents(contents) if contents else []
    return await db.write(
        lambda c: apply_extracted_facts(
            c,
            user_id,
            extracted,
            vectors,
            embedder.model_id,
            source=source,
            chat_id=chat_id,
            origin=origin,
            now=now,
        )
    )


def pinned_memories(conn: Conn, user_id: int) -> dict[int, Memory]:
    """The user's pinned memories by id (memories_pinned index: a handful, read every turn)."""
    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM memories WHERE user_id = ? AND pinned = 1", (user_id,)
        )
    ]
    return get_memories(conn, ids)


def list_facts(conn: Conn, user_id: int, *, limit: int = 500) -> list[Memory]:
    """The user's facts, preferences and tasks, most recently updated first."""
    facts = list_memories(conn, user_id, kinds=FACT_KINDS, limit=limit)
    return sorted(facts, key=lambda m: (-m.updated_at, -m.id))


_KIND_ORDER = {"preference": 0, "fact": 1, "task": 2}


def prompt_facts(conn: Conn, user_id: int, budget_chars: int) -> list[tuple[Memory, str]]:
    """The facts that go in the system prompt, each with its line, within `budget_chars`.

    Pinned memories first (the owner wants them always there; any kind), then preferences (they
    change how to answer), facts, tasks; within each, the most recently updated first, so what
    is dropped at the budget is the oldest and least useful.
    """
    if budget_chars <= 0:
        return []
    # Facts derived from outside content stay out of every prompt, pinned or not (memory/
    # provenance.py): search finds them, and a turn that reads them is tainted.
    pinned = [m for m in pinned_memories(conn, user_id).values() if m.origin != "outside"]
    others = [m for m in list_facts(conn, user_id) if not m.pinned and m.origin != "outside"]
    facts = sorted(pinned, key=lambda m: (-m.updated_at, -m.id)) + sorted(
        others, key=lambda m: (_KIND_ORDER[m.kind], -m.updated_at, -m.id)
    )
    shown: list[tuple[Memory, str]] = []
    used = 0
    for fact in facts:
        key = f" (key: {fact.slot})" if fact.slot else ""
        line = f"- [{fact.kind}] {' '.join(fact.content.split())}{key}"
        if used + len(line) + 1 > budget_chars:
            continue  # a shorter later fact may still fit
        shown.append((fact, line))
        used += len(line) + 1
    return shown


def facts_for_prompt(conn: Conn, user_id: int, budget_chars: int) -> str:
    """The facts section of the system prompt (prompt_facts' lines)."""
    return "\n".join(line for _, line in prompt_facts(conn, user_id, budget_chars))


def outside_facts_in_prompt(conn: Conn, user_id: int, budget_chars: int) -> bool:
    """Whether the facts section holds a fact from outside content (store.taints): listed in
    every prompt, it taints a turn as a recalled memory from outside would."""
    return taints([m for m, _ in prompt_facts(conn, user_id, budget_chars)])
