"""The web search cache: results by normalised query, provider and size, for web.cache_ttl."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from agentd.db.runner import Runner
from agentd.web.search import SearchResult

_RESULTS = TypeAdapter(list[SearchResult])


def normalise_query(query: str) -> str:
    """The form two queries share when they ask the same thing: NFKC, casefolded, one space."""
    return " ".join(unicodedata.normalize("NFKC", query).casefold().split())


def query_digest(query: str) -> str:
    """A short stable id of the normalised query (for the audit log, which keeps no content)."""
    return hashlib.sha256(normalise_query(query).encode()).hexdigest()[:16]


def cache_key(provider: str, max_results: int, query: str) -> str:
    raw = json.dumps([provider, max_results, normalise_query(query)], ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class CachedResults:
    results: list[SearchResult]
    fetched_at: float


class SearchCache:
    """Rows in `web_cache`; an entry older than ttl is a miss (and is replaced on store)."""

    def __init__(self, db: Runner, ttl: float) -> None:
        self._db = db
        self.ttl = ttl

    async def get(
        self, provider: str, max_results: int, query: str, now: float
    ) -> CachedResults | None:
        """Fresh results for this query, or None."""
        if self.ttl <= 0:
            return None
        key = cache_key(provider, max_results, query)
        row = await self._db.read(_select, key, now - self.ttl)
        if row is None:
            return None
        try:
            results = _RESULTS.validate_json(row[0])
        except ValidationError:
            return None  # written by an older version with another shape: just search again
        return CachedResults(results=results, fetched_at=row[1])

    async def put(
        self, provider: str, max_results: int, query: str, results: list[SearchResult], now: float
    ) -> None:
        """Store fresh results and drop every expired row (the table never grows unbounded)."""
        if self.ttl <= 0:
            return
        row = (
            cache_key(provider, max_results, query),
            provider,
            normalise_query(query),
            max_results,
            _RESULTS.dump_json(results).decode(),
            now,
        )
        await self._db.write(_upsert, row, now - self.ttl)


def _select(conn: Any, key: str, fresh_after: float) -> Any:
    return conn.execute(
        "SELECT results, fetched_at FROM web_cache WHERE key = ? AND fetched_at > ?",
        (key, fresh_after),
    ).fetchone()


def _upsert(conn: Any, row: tuple[Any, ...], stale_before: float) -> None:
    conn.execute(
        "INSERT INTO web_cache (key, provider, query, max_results, results, fetched_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
        "results = excluded.results, fetched_at = excluded.fetched_at",
        row,
    )
    conn.execute("DELETE FROM web_cache WHERE fetched_at <= ?", (stale_before,))
