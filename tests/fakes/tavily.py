"""A fake Tavily Search API (`POST /search`, Bearer auth, Tavily's error bodies).

In-process: ``with FakeTavily.running(api_key="tvly-test") as tavily: ... tavily.base_url``;
as a process: ``python -m tests.fakes.tavily --port N`` (prints the base URL).
"""

from __future__ import annotations

import copy
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes._server import FakeServer, sleep_or_closing

SEARCH_DEPTHS = ("basic", "advanced", "fast", "ultra-fast")
TOPICS = ("general", "news", "finance")
# Tavily's documented error messages by status.
ERROR_MESSAGES = {
    400: "Invalid request parameters.",
    401: "Unauthorized: missing or invalid API key.",
    403: "This feature is not available on your plan.",
    429: "Your request has been blocked due to excessive requests. Please reduce rate of requests.",
    432: "This request exceeds your plan's set usage limit. Please upgrade your plan.",
    433: "This request exceeds the pay-as-you-go limit.",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


@dataclass
class TavilyError:
    """A scripted HTTP error answer (Tavily's `{"detail": {"error": ...}}` body)."""

    status: int
    message: str | None = None
    retry_after: float | None = None


@dataclass
class TavilyDrop:
    """Close the connection without answering."""


@dataclass
class TavilyDelay:
    """Wait this long before answering the request (exercise client timeouts)."""

    seconds: float


Scripted = TavilyError | TavilyDrop | TavilyDelay


def make_result(
    title: str,
    url: str,
    content: str = "",
    *,
    score: float = 0.9,
    published_date: str | None = None,
) -> dict[str, Any]:
    """One result object shaped like Tavily's."""
    result: dict[str, Any] = {
        "title": title,
        "url": url,
        "content": content or f"About {title}.",
        "score": score,
        "raw_content": None,
    }
    if published_date is not None:
        result["published_date"] = published_date
    return result


def default_results(query: str, n: int = 10) -> list[dict[str, Any]]:
    """Deterministic results for any query: `Result i for <query>` at example.com."""
    slug = "-".join(query.lower().split())[:40] or "query"
    return [
        make_result(
            f"Result {i} for {query}",
            f"https://example.com/{slug}/{i}",
            f"Snippet {i} about {query}.",
            score=round(0.99 - i * 0.05, 2),
        )
        for i in range(1, n + 1)
    ]


class FakeTavily(FakeServer):
    """Fake Tavily Search API server (POST /search)."""

    def __init__(
        self, *, api_key: str | None = "tvly-test-key", host: str = "127.0.0.1", port: int = 0
    ) -> None:
        """api_key: the only Bearer key accepted (None accepts any request)."""
        super().__init__(host=host, port=port)
        self.api_key = api_key
        self.reset()

    def reset(self) -> None:
        """Forget scripted results, queued errors and recorded requests."""
        with self._lock:
            self._results: dict[str, list[dict[str, Any]]] = {}
            self._default: list[dict[str, Any]] | None = None
            self._queue: deque[Scripted] = deque()
            self._requests: list[dict[str, Any]] = []
            self._changed()

    # ======================================================================= scripting API

    def set_results(self, query: str, results: list[dict[str, Any]]) -> None:
        """Results for this exact query (whitespace-trimmed, case-insensitive)."""
        with self._lock:
            self._results[_norm(query)] = copy.deepcopy(results)

    def set_default(self, results: list[dict[str, Any]] | None) -> None:
        """Results for every unscripted query (None: `default_results(query)`)."""
        with self._lock:
            self._default = copy.deepcopy(results)

    def enqueue(self, *items: Scripted) -> None:
        """Answers for the next requests, in order, before any results are served."""
        with self._lock:
            self._queue.extend(items)

    def enqueue_error(
        self, status: int, message: str | None = None, *, retry_after: float | None = None
    ) -> None:
        """The next request gets this HTTP error, e.g. (429, retry_after=1) or (401,)."""
        self.enqueue(TavilyError(status, message, retry_after))

    def enqueue_drop(self) -> None:
        self.enqueue(TavilyDrop())

    def enqueue_delay(self, seconds: float) -> None:
        self.enqueue(TavilyDelay(seconds))

    # ===================================================================== inspection API

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request: path, body, auth ('ok' | 'missing' | 'invalid'), status, time.

        The Authorization header itself is never recorded."""
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def queries(self) -> list[str]:
        """The query of every request, in order."""
        with self._lock:
            return [r["body"].get("query", "") for r in self._requests if r["body"]]

    def wait_for_requests(self, n: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        return self.wait_until(
            lambda: copy.deepcopy(self._requests) if len(self._requests) >= n else None,
            timeout,
            f"{n} requests",
        )

    # ==================================================================== HTTP plumbing

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/search", self._handle_search)

    def _auth(self, request: web.Request) -> str:
        header = request.headers.get("Authorization", "")
        if not header:
            return "missing"
        if self.api_key is None:
            return "ok"
        return "ok" if header == f"Bearer {self.api_key}" else "invalid"

    @staticmethod
    def error(status: int, message: str | None = None, **headers: str) -> web.Response:
        body = {"detail": {"error": message or ERROR_MESSAGES.get(status, "Error")}}
        return web.json_response(body, status=status, headers=headers or None)

    async def _handle_search(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        auth = self._auth(request)
        with self._lock:
            record = {
                "path": request.path,
                "body": body if isinstance(body, dict) else {},
                "auth": auth,
                "status": None,
                "time": time.time(),
            }
            self._requests.append(record)
            scripted = self._queue.popleft() if self._queue else None
            self._changed()
        response = await self._answer(request, body, auth, scripted)
        with self._lock:
            record["status"] = response.status
            self._changed()
        return response

    async def _answer(
        self, request: web.Request, body: Any, auth: str, scripted: Scripted | None
    ) -> web.StreamResponse:
        if isinstance(scripted, TavilyDelay):
            await sleep_or_closing(self, scripted.seconds)
            scripted = None
        if isinstance(scripted, TavilyDrop):
            return self.drop_connection(request)
        if isinstance(scripted, TavilyError):
            headers = {}
            if scripted.retry_after is not None:
                headers["Retry-After"] = f"{scripted.retry_after:g}"
            return self.error(scripted.status, scripted.message, **headers)
        if auth != "ok":
            return self.error(401)
        problem = _validate(body)
        if problem:
            return self.error(400, problem)
        query = body["query"]
        max_results = body.get("max_results", 5)
        with self._lock:
            results = self._results.get(_norm(query))
            if results is None:
                results = self._default if self._default is not None else default_results(query)
            results = copy.deepcopy(results[:max_results])
        return web.json_response(
            {
                "query": query,
                "follow_up_questions": None,
                "answer": None,
                "images": [],
                "results": results,
                "response_time": 0.42,
                "request_id": str(uuid.uuid4()),
            }
        )


def _norm(query: str) -> str:
    return " ".join(query.lower().split())


def _validate(body: Any) -> str | None:
    """Why the request body is invalid for the real API, or None."""
    if not isinstance(body, dict):
        return "Request body must be a JSON object."
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        return "Query is missing or empty."
    max_results = body.get("max_results", 5)
    if not isinstance(max_results, int) or isinstance(max_results, bool):
        return "max_results must be an integer."
    if not 0 <= max_results <= 20:
        return "max_results must be between 0 and 20."
    if body.get("search_depth", "basic") not in SEARCH_DEPTHS:
        return f"Invalid search_depth. Must be one of {', '.join(SEARCH_DEPTHS)}."
    if body.get("topic", "general") not in TOPICS:
        return f"Invalid topic. Must be one of {', '.join(TOPICS)}."
    return None


if __name__ == "__main__":
    FakeTavily.main()
