"""Vector spaces shared by every store that searches by meaning (memories, document chunks).

A `VectorIndex` names three tables of one kind of row:
- `<prefix>_spaces`: one row per (embedding model, dimension);
- `<prefix>_vectors`: the exact float32 vector of each row (`<key>` → row id, primary key), and
  the space it belongs to; deleting the row cascades here;
- per space, a vec0 table `<prefix>_bq_<space>` with the sign bits of each vector (`bit[dim]`,
  hamming distance), partitioned by `partition(row) * VEC_SHARDS + id % VEC_SHARDS`. Triggers on
  `<prefix>_vectors` keep it in step, whoever writes or deletes.

The two plain tables come from a migration; the vec0 table is created at run time
(`ensure_space`), because its dimension is whatever the configured embedder produces, and a model
change adds a new space instead of altering one. Vectors of other spaces are never searched.

Search (`VectorIndex.search`): a hamming KNN over the asked partition's shards returns candidates,
rescored by exact cosine distance on the float32 vectors; with fewer vectors than candidates this
is exact. Everything is a plain function of a connection, run through `Database.write/read`.
"""

from __future__ import annotations

import json
import math
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Conn = Any  # sqlite3.Connection or sqlean's equivalent

# vec0 allocates storage per partition in chunks of this many vectors. The default (1024) wastes
# space when a store has a few users with few rows; bit vectors are small (dim/8 bytes), so
# 256 costs little scan speed (measured in benchmarks/memory_scale.py).
VEC_CHUNK_SIZE = 256
# Each partition's bit vectors are spread over this many vec0 partitions (partition key
# partition * VEC_SHARDS + id % VEC_SHARDS). Why: a vec0 KNN costs O(n · k) (its top-k
# selection is linear in k), so one query for 128 candidates over 100k vectors takes ~25 ms,
# while 8 queries for 16 each over 12.5k take ~5 ms and return nearly the same candidates
# (recall of the exact top-10 0.996 vs 1.0, benchmarks/memory_scale.py).
VEC_SHARDS = 8
# Candidates the bit-vector prefilter hands to exact rescoring, split evenly over the shards.
# 128 keeps 0.996 of the exact top-10 at 100k clustered vectors.
MIN_CANDIDATES = 128
CANDIDATES_PER_RESULT = 4


class VectorStoreError(Exception):
    """Vectors cannot be stored as asked; the message says why."""


def pack_vector(vector: Sequence[float]) -> bytes:
    """float32 little-endian, the layout sqlite-vec reads."""
    return array("f", vector).tobytes()


@dataclass(frozen=True)
class VectorIndex:
    """The vector tables of one kind of row (see the module docstring).

    `partition` is SQL over `new.<key>` giving the row's partition (memories: its user id), or
    "0" when everything is searched together. All three are code constants, never user input.
    """

    prefix: str
    key: str
    partition: str = "0"

    @property
    def spaces_table(self) -> str:
        return f"{self.prefix}_spaces"

    @property
    def vectors_table(self) -> str:
        return f"{self.prefix}_vectors"

    def bq_table(self, space_id: int) -> str:
        return f"{self.prefix}_bq_{int(space_id)}"

    def find_space(self, conn: Conn, model_id: str, dim: int) -> int | None:
        row = conn.execute(
            f"SELECT id FROM {self.spaces_table} WHERE model_id = ? AND dim = ?", (model_id, dim)
        ).fetchone()
        return None if row is None else int(row[0])

    def ensure_space(self, conn: Conn, model_id: str, dim: int, *, now: float | None = None) -> int:
        """The id of the space (model, dim), creating it, its vec0 table and triggers if needed."""
        space = self.find_space(conn, model_id, dim)
        if space is not None:
            return space
        if dim % 8:
            raise VectorStoreError(
                f"embedding dimension {dim} is not a multiple of 8 (bit[] needs it)"
            )
        cur = conn.execute(
            f"INSERT INTO {self.spaces_table} (model_id, dim, created_at) VALUES (?, ?, ?)",
            (model_id, dim, time.time() if now is None else now),
        )
        space = int(cur.lastrowid)
        table, key, vectors = self.bq_table(space), self.key, self.vectors_table
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0("
            f"part integer partition key, embedding bit[{dim}], chunk_size={VEC_CHUNK_SIZE})"
        )
        conn.execute(
            f"CREATE TRIGGER IF NOT EXISTS {table}_ai AFTER INSERT ON {vectors} "
            f"WHEN new.space_id = {space} BEGIN "
            f"INSERT INTO {table} (rowid, part, embedding) VALUES (new.{key}, "
            f"({self.partition}) * {VEC_SHARDS}"
            f" + new.{key} % {VEC_SHARDS}, vec_quantize_binary(new.embedding)); END"
        )
        conn.execute(
            f"CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON {vectors} "
            f"WHEN old.space_id = {space} BEGIN DELETE FROM {table} WHERE rowid = old.{key}; END"
        )
        return space

    def drop_space(self, conn: Conn, space_id: int) -> None:
        table = self.bq_table(space_id)
        conn.execute(f"DELETE FROM {self.vectors_table} WHERE space_id = ?", (space_id,))
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_ai")
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_ad")
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"DELETE FROM {self.spaces_table} WHERE id = ?", (space_id,))

    def drop_other_spaces(self, conn: Conn, model_id: str, dim: int) -> list[str]:
        """Delete every vector not of (model_id, dim) and its vec0 table; return those spaces."""
        rows = conn.execute(
            f"SELECT id, model_id, dim FROM {self.spaces_table}"
            " WHERE NOT (model_id = ? AND dim = ?)",
            (model_id, dim),
        ).fetchall()
        for row in rows:
            self.drop_space(conn, int(row[0]))
        return [f"{row[1]}/{row[2]}" for row in rows]

    def set_vectors(
        self, conn: Conn, model_id: str, items: Sequence[tuple[int, Sequence[float]]]
    ) -> int:
        """Store (row id, vector) pairs in the space of model_id, replacing any older vector."""
        if not items:
            return 0
        dim = len(items[0][1])
        space = self.ensure_space(conn, model_id, dim)
        rows = []
        for row_id, vector in items:
            if len(vector) != dim:
                raise VectorStoreError(f"row {row_id}: vector has {len(vector)} dims, not {dim}")
            rows.append((row_id, space, pack_vector(vector)))
        # Delete then insert (never INSERT OR REPLACE: REPLACE skips delete triggers, and vec0
        # rejects it), so the old space's bit vector goes too.
        conn.executemany(
            f"DELETE FROM {self.vectors_table} WHERE {self.key} = ?", [(r[0],) for r in rows]
        )
        conn.executemany(
            f"INSERT INTO {self.vectors_table} ({self.key}, space_id, embedding) VALUES (?, ?, ?)",
            rows,
        )
        return len(rows)

    def search(
        self,
        conn: Conn,
        vector: Sequence[float],
        model_id: str,
        limit: int,
        *,
        partition: int = 0,
        candidates: int | None = None,
        join: str = "",
        where: str = "",
        params: Mapping[str, Any] | None = None,
        prefilter: Callable[[int, int], list[int]] | None = None,
    ) -> list[tuple[int, float]]:
        """(row id, cosine distance) of the nearest rows of one partition, nearest first.

        `join` (a CROSS JOIN, to keep the order) and `where` (code constants, over alias `v` of
        the vectors table) narrow the
        rescored candidates, e.g. to a user's rows of some kinds; `params` fills their
        named placeholders. `prefilter(space, n)`, when given, names the candidates instead of
        the vec0 KNN (memory/bits.py). Zero or non-finite query vectors find nothing.
        """
        if limit <= 0 or not any(vector) or not all(math.isfinite(x) for x in vector):
            return []  # an empty text embeds to zeros: no direction, nothing to rank
        space = self.find_space(conn, model_id, len(vector))
        if space is None:
            return []
        n = candidates or max(MIN_CANDIDATES, limit * CANDIDATES_PER_RESULT)
        per_shard = min(4096, max(1, -(-max(n, limit) // VEC_SHARDS)))
        values: dict[str, Any] = {
            **(params or {}),
            "q": pack_vector(vector),
            "space": space,
            "limit": limit,
        }
        if prefilter is not None:
            shards = "SELECT value AS id FROM json_each(:ids)"
            values["ids"] = json.dumps(prefilter(space, max(n, limit)))
        else:
            table = self.bq_table(space)
            shards = " UNION ALL ".join(
                f"SELECT rowid AS id FROM (SELECT rowid FROM {table} WHERE embedding MATCH"
                f" vec_quantize_binary(:q) AND k = :k AND part = :p{s})"
                for s in range(VEC_SHARDS)
            )
            values["k"] = per_shard
            values.update({f"p{s}": partition * VEC_SHARDS + s for s in range(VEC_SHARDS)})
        extra = f" AND ({where})" if where else ""
        # CROSS JOIN fixes the join order (SQLite never reorders it): the candidates first, then
        # each one's row by primary key. Left to the planner, a small table got scanned with the
        # eight KNN queries re-run per row (141 memories: 90 ms per search instead of 1.5), and
        # a materialised CTE made it scan the user's 100k memories instead (850 ms).
        rows = conn.execute(
            f"WITH cand AS ({shards})"
            f" SELECT v.{self.key}, vec_distance_cosine(v.embedding, :q) AS d"
            f" FROM cand CROSS JOIN {self.vectors_table} v ON v.{self.key} = cand.id{join}"
            f" WHERE v.space_id = :space{extra}"
            f" ORDER BY d IS NULL, d, v.{self.key} LIMIT :limit",
            values,
        ).fetchall()
        # A stored zero vector (a text of stopwords only, under hashing) has no cosine distance:
        # sqlite-vec gives NULL. It has no direction either, so it is no one's neighbour.
        return [(int(r[0]), float(r[1])) for r in rows if r[1] is not None]
