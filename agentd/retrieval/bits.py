"""In-process copies of users' memory sign bits, scanned exactly in numpy for vector candidates.

sqlite-vec's bit KNN over a user's 100k memories costs ~15 ms (its top-k selection is linear in
k, vectors.py); XOR and popcount over the same bits held as a numpy matrix cost ~1 ms, and are
exact (no sharding). The database stays the source of truth:

- a copy of one (space, user) is loaded on its first search, from `memory_vectors`;
- `memory_vector_counts` (migration m019_recall) counts the inserts and deletes of each space,
  bumped by triggers whoever writes (this process, the CLI, a reindex); every search reads that
  row, and a copy that no longer matches is brought up to date before it is used: new rows
  only are appended when nothing was deleted and every insert since has a higher id (a new
  memory), otherwise the copy is reloaded whole (a forget, prune, reindex, replaced vector);
- candidates are rescored on the stored float vectors and re-checked against the user
  (VectorIndex.search), so a copy decides which rows are candidates, never which rows exist.

A `BitCache` belongs to one database and is used from one thread at a time (the daemon's
connection thread), and holds at most `max_partitions` users' copies (48 bytes per 384-dim
memory: 4.8 MB per 100k).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentd.retrieval.vectors import pack_vector

Conn = Any


@dataclass
class _Copy:
    """One user's bits in one space, as of the counts it was brought up to date with."""

    inserts: int
    deletes: int
    max_id: int  # the highest vector row id in the whole space when last read
    ids: Any  # int64[n]
    words: Any  # uint64[words, n]: one row per 64 bits, so each XOR runs over contiguous memory


class BitCache:
    """Users' sign bits per memory space, kept in step with the database (module docstring)."""

    def __init__(self, max_partitions: int = 8) -> None:
        self._copies: OrderedDict[tuple[int, int], _Copy] = OrderedDict()
        self._max = max_partitions
        # How often a copy was read whole, and brought up to date by appending (tests read it).
        self.loads = 0
        self.appends = 0

    def candidates(
        self, conn: Conn, space: int, user_id: int, vector: Sequence[float], n: int
    ) -> list[int]:
        """Ids of the user's `n` memories nearest to `vector` by hamming distance of sign bits
        (ties at the cut are taken by id), in no particular order."""
        import numpy as np

        copy = self._current(conn, space, user_id)
        count = len(copy.ids)
        if count <= n:
            return copy.ids.tolist()
        # sqlite-vec quantises the query, so its bits are laid out as the stored ones.
        bits = conn.execute("SELECT vec_quantize_binary(?)", (pack_vector(vector),)).fetchone()[0]
        query = _words(np, [bits])[:, 0]
        dist = np.zeros(count, dtype=np.uint16)
        scratch = np.empty(count, dtype=np.uint64)
        ones = np.empty(count, dtype=np.uint8)
        for row, word in zip(copy.words, query, strict=True):
            np.bitwise_xor(row, word, out=scratch)
            _popcount(np, scratch, ones)
            dist += ones
        # Distances are small integers: a histogram finds the cut in O(n); argpartition over
        # 100k rows costs more than the scan itself.
        cut = int(np.searchsorted(np.cumsum(np.bincount(dist)), n))
        inside = np.flatnonzero(dist < cut)
        at_cut = np.flatnonzero(dist == cut)[: n - len(inside)]
        return copy.ids[np.concatenate((inside, at_cut))].tolist()

    def _current(self, conn: Conn, space: int, user_id: int) -> _Copy:
        key = (space, user_id)
        # One read transaction: the counts and the rows read after them are one snapshot.
        conn.execute("SAVEPOINT memory_bits")
        try:
            inserts, deletes = _counts(conn, space)
            copy = self._copies.get(key)
            if copy is None or copy.deletes != deletes or copy.inserts > inserts:
                copy = self._load(conn, space, user_id, inserts, deletes)
            elif copy.inserts != inserts:
                copy = self._append(conn, space, user_id, copy, inserts) or self._load(
                    conn, space, user_id, inserts, deletes
                )
        finally:
            conn.execute("RELEASE memory_bits")
        self._copies[key] = copy
        self._copies.move_to_end(key)
        while len(self._copies) > self._max:
            self._copies.popitem(last=False)
        return copy

    def _load(self, conn: Conn, space: int, user_id: int, inserts: int, deletes: int) -> _Copy:
        import numpy as np

        self.loads += 1
        ids, bits = _rows(conn, space, user_id, after=0)
        return _Copy(inserts, deletes, _max_id(conn, space), ids, _words(np, bits))

    def _append(
        self, conn: Conn, space: int, user_id: int, copy: _Copy, inserts: int
    ) -> _Copy | None:
        """The copy with the rows inserted since, if they are exactly the rows above its
        max_id (new memories); None when some insert went below it (a reindex filling gaps)."""
        import numpy as np

        added = conn.execute(
            "SELECT count(*) FROM memory_vectors WHERE space_id = ? AND memory_id > ?",
            (space, copy.max_id),
        ).fetchone()[0]
        if added != inserts - copy.inserts:
            return None
        self.appends += 1
        ids, bits = _rows(conn, space, user_id, after=copy.max_id)
        if not len(copy.ids):
            words = _words(np, bits)
        elif len(bits):
            words = np.concatenate((copy.words, _words(np, bits)), axis=1)
            ids = np.concatenate((copy.ids, ids))
        else:
            words, ids = copy.words, copy.ids
        return _Copy(inserts, copy.deletes, _max_id(conn, space), ids, words)


def _counts(conn: Conn, space: int) -> tuple[int, int]:
    row = conn.execute(
        "SELECT inserts, deletes FROM memory_vector_counts WHERE space_id = ?", (space,)
    ).fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def _max_id(conn: Conn, space: int) -> int:
    row = conn.execute(
        "SELECT max(memory_id) FROM memory_vectors WHERE space_id = ?", (space,)
    ).fetchone()
    return int(row[0] or 0)


def _rows(conn: Conn, space: int, user_id: int, *, after: int) -> tuple[Any, list[bytes]]:
    """(ids, sign bits) of the user's vectors in a space with ids above `after`, by id."""
    import numpy as np

    rows = conn.execute(
        "SELECT v.memory_id, vec_quantize_binary(v.embedding) FROM memory_vectors v"
        " CROSS JOIN memories m ON m.id = v.memory_id"
        " WHERE v.space_id = ? AND v.memory_id > ? AND m.user_id = ? ORDER BY v.memory_id",
        (space, after, user_id),
    ).fetchall()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    return ids, [r[1] for r in rows]


def _words(np: Any, bits: Sequence[bytes]) -> Any:
    """Equal-length bit strings as uint64[words, n] (zero-padded to whole 64-bit words)."""
    if not bits:
        return np.zeros((0, 0), dtype=np.uint64)
    width = len(bits[0])
    padded = -(-width // 8) * 8
    raw = np.zeros((len(bits), padded), dtype=np.uint8)
    raw[:, :width] = np.frombuffer(b"".join(bits), dtype=np.uint8).reshape(len(bits), width)
    return np.ascontiguousarray(raw.view(np.uint64).T)


def _popcount(np: Any, values: Any, out: Any) -> None:
    """Set bits of each uint64 into `out` (uint8): numpy ≥ 2 has it built in."""
    if hasattr(np, "bitwise_count"):
        np.bitwise_count(values, out=out)
        return
    table = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
    out[:] = table[values.view(np.uint8).reshape(-1, 8)].sum(axis=1, dtype=np.uint8)
