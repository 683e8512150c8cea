"""The in-process sign-bit copy (memory/bits.py): exact hamming candidates, never stale.

Every writer is another connection or another process here, as with the CLI beside the daemon:
the copy must notice their inserts and deletes through the database alone.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

from agentd.db.connect import open_sync
from agentd.db.runner import ConnRunner
from agentd.memory import HashingEmbedder, NewMemory, remember, search
from agentd.memory.search import vector_search
from agentd.memory.store import find_space, forget, set_vectors
from agentd.retrieval.bits import BitCache

EMB = HashingEmbedder()
TOPICS = ["garden tomatoes", "train to Lisbon", "piano lessons", "tax return", "cat Miso"]


async def _fill(conn: Any, user_id: int, n: int, start: int = 0) -> list[int]:
    db = ConnRunner(conn)
    ids = []
    for i in range(start, start + n):
        content = f"{TOPICS[i % 5]} note {i} word{i * 7 % 97}"
        ids.append(
            await remember(db, EMB, NewMemory(user_id=user_id, kind="note", content=content))
        )
    return ids


def _space(conn: Any) -> int:
    space = find_space(conn, EMB.model_id, EMB.dim)
    assert space is not None
    return space


def _hamming(conn: Any, user_id: int, query: list[float]) -> dict[int, int]:
    """Each of the user's memories' hamming distance to the query, from sign bits in Python."""
    qbits = [x > 0 for x in query]
    rows = conn.execute(
        "SELECT v.memory_id, v.embedding FROM memory_vectors v JOIN memories m"
        " ON m.id = v.memory_id WHERE m.user_id = ?",
        (user_id,),
    ).fetchall()
    out = {}
    for mid, blob in rows:
        vec = memoryview(blob).cast("f")
        out[int(mid)] = sum((vec[i] > 0) != qbits[i] for i in range(len(qbits)))
    return out


async def test_candidates_are_the_exact_hamming_nearest_of_the_user_only(conn: Any) -> None:
    await _fill(conn, 1, 300)
    await _fill(conn, 2, 60)
    query = EMB.embed_sync("train ticket to Lisbon")
    got = BitCache().candidates(conn, _space(conn), 1, query, 40)
    dist = _hamming(conn, 1, query)
    assert len(got) == 40 and set(got) <= set(dist)  # user 2's rows are never candidates
    outside = set(dist) - set(got)
    assert max(dist[m] for m in got) <= min(dist[m] for m in outside)


async def test_with_enough_candidates_the_results_equal_the_sqlite_vec_search(conn: Any) -> None:
    await _fill(conn, 1, 150)
    bits = BitCache()
    for text in ("piano", "tax return deadline", "Miso the cat"):
        query = EMB.embed_sync(text)
        plain = vector_search(conn, 1, query, EMB.model_id, 10, candidates=200)
        cached = vector_search(conn, 1, query, EMB.model_id, 10, candidates=200, bits=bits)
        assert cached == plain and len(cached) == 10
    assert bits.loads == 1  # nothing changed between the searches: one load


async def test_memories_added_by_another_connection_are_appended_and_found(
    conn: Any, tmp_path: Path
) -> None:
    await _fill(conn, 1, 200)
    bits = BitCache()
    query = EMB.embed_sync("saxophone recital")
    assert not any(
        "saxophone" in h.memory.content
        for h in search(conn, 1, "saxophone", query, EMB.model_id, k=5, bits=bits)
    )
    other = open_sync(tmp_path / "mem.db")
    new = await remember(
        ConnRunner(other), EMB, NewMemory(user_id=1, kind="note", content="saxophone recital")
    )
    other.close()
    hits = search(conn, 1, "", query, EMB.model_id, k=5, mode="vector", bits=bits)
    assert hits[0].memory.id == new
    assert (bits.loads, bits.appends) == (1, 1)


async def test_a_memory_forgotten_elsewhere_leaves_results_and_the_copy(
    conn: Any, tmp_path: Path
) -> None:
    ids = await _fill(conn, 1, 200)
    bits = BitCache()
    query = EMB.embed_sync("cat Miso note 4")
    first = vector_search(conn, 1, query, EMB.model_id, 5, bits=bits)
    gone = first[0][0]
    other = open_sync(tmp_path / "mem.db")
    other.execute("BEGIN IMMEDIATE")
    assert forget(other, gone)
    other.execute("COMMIT")
    other.close()
    after = vector_search(conn, 1, query, EMB.model_id, 5, bits=bits)
    assert gone not in {m for m, _ in after} and len(after) == 5
    assert bits.loads == 2  # a delete reloads the copy whole
    assert gone not in bits.candidates(conn, _space(conn), 1, query, len(ids))


async def test_a_vector_filled_in_below_the_newest_id_reloads(conn: Any) -> None:
    """A reindex gives an old memory its first vector: not above the copy's newest id, so
    appending new ids would miss it."""
    ids = await _fill(conn, 1, 20)
    query = EMB.embed_sync("violin")
    conn.execute("DELETE FROM memory_vectors WHERE memory_id = ?", (ids[3],))
    bits = BitCache()
    assert ids[3] not in bits.candidates(conn, _space(conn), 1, query, 100)
    set_vectors(conn, EMB.model_id, [(ids[3], EMB.embed_sync("violin lessons"))])
    assert ids[3] in bits.candidates(conn, _space(conn), 1, query, 100)
    assert (bits.loads, bits.appends) == (2, 0)


async def test_another_process_writing_is_seen(conn: Any, tmp_path: Path) -> None:
    await _fill(conn, 1, 150)
    bits = BitCache()
    query = EMB.embed_sync("harbour kayak trip")
    assert not vector_search(conn, 7, query, EMB.model_id, 5, bits=bits)
    script = textwrap.dedent(f"""
        import asyncio
        from agentd.db.connect import open_sync
        from agentd.memory import ConnRunner, HashingEmbedder, NewMemory, remember
        conn = open_sync({str(tmp_path / "mem.db")!r})
        memory = NewMemory(user_id=7, kind="note", content="harbour kayak trip")
        asyncio.run(remember(ConnRunner(conn), HashingEmbedder(), memory))
    """)
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
    assert await asyncio.wait_for(child.wait(), 60) == 0
    hits = search(conn, 7, "kayak", query, EMB.model_id, k=5, mode="vector", bits=bits)
    assert [h.memory.content for h in hits] == ["harbour kayak trip"]
    assert all(
        h.memory.user_id == 1
        for h in search(conn, 1, "kayak", query, EMB.model_id, k=50, bits=bits)
    )


async def test_copies_are_bounded_least_recently_used_first(conn: Any) -> None:
    for user in (1, 2, 3):
        await _fill(conn, user, 5)
    bits = BitCache(max_partitions=2)
    query = EMB.embed_sync("piano")
    for user in (1, 2, 1, 3, 1, 2):  # 3 evicts 2, then 2 evicts 3
        assert vector_search(conn, user, query, EMB.model_id, 5, bits=bits)
    assert bits.loads == 4


async def test_kinds_narrow_the_vector_arm_with_either_prefilter(conn: Any) -> None:
    db = ConnRunner(conn)
    for i, kind in enumerate(["note", "summary", "fact"] * 50):
        content = f"{TOPICS[i % 5]} {kind} {i}"
        await remember(db, EMB, NewMemory(user_id=1, kind=kind, content=content))
    query = EMB.embed_sync("train to Lisbon")
    for bits in (None, BitCache()):
        for kinds in (["summary"], ["fact", "note"]):
            hits = search(
                conn, 1, "", query, EMB.model_id, k=20, mode="vector", kinds=kinds, bits=bits
            )
            assert len(hits) == 20 and {h.memory.kind for h in hits} == set(kinds)
        everything = search(conn, 1, "", query, EMB.model_id, k=30, mode="vector", bits=bits)
        assert {h.memory.kind for h in everything} == {"note", "summary", "fact"}
