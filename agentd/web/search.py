"""Web search providers: one protocol, and Tavily's HTTP API behind it (R-WEB-1)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import aiohttp
from pydantic import BaseModel, ConfigDict, ValidationError

from agentd.net.retry import RetryableHttpError, http_retrying, retry_after
from agentd.runtime.redact import clip

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
#: Ceiling on one wait between attempts, Retry-After included (a turn is waiting on us).
MAX_RETRY_WAIT = 10.0


class SearchResult(BaseModel):
    """One hit: what the model cites (title, url) and what it reads (snippet)."""

    title: str
    url: str
    snippet: str = ""
    published: str | None = None


class SearchError(Exception):
    """The search failed; the message is safe to show the model (never holds the key)."""

    def __init__(self, message: str, *, kind: str = "error", status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind  # short code for the audit log: auth, quota, bad_request, unavailable…
        self.status = status


class SearchProvider(Protocol):
    """What the web_search tool needs from a search backend."""

    #: Stable name, part of the cache key (results of two providers never mix).
    name: str

    async def search(self, query: str, max_results: int) -> list[SearchResult]: ...


_RETRYABLE = (RetryableHttpError, aiohttp.ClientConnectionError, TimeoutError)


class _TavilyHit(BaseModel):
    # Tavily's result object; extra fields (score, raw_content, favicon…) are ignored.
    model_config = ConfigDict(extra="ignore")

    title: str = ""
    url: str
    content: str = ""
    published_date: str | None = None


class _TavilyResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    results: list[_TavilyHit]


# Status codes Tavily documents, mapped to what the user (via the model) should do about them.
_CLIENT_ERRORS: dict[int, tuple[str, str]] = {
    400: ("bad_request", "Tavily rejected the search request"),
    401: ("auth", "Tavily rejected the API key (missing, invalid or revoked)"),
    403: ("forbidden", "Tavily refused the request for this API key's plan"),
    432: ("quota", "Tavily plan usage limit reached"),
    433: ("quota", "Tavily pay-as-you-go limit reached"),
}


class TavilyProvider:
    """Tavily's `POST /search` (Bearer auth), with retries on 429, 5xx and network errors."""

    name = "tavily"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = "https://api.tavily.com",
        search_depth: str = "basic",
        timeout: float = 20.0,
        retries: int = 2,
        retry_base_delay: float = 1.0,
        max_retry_wait: float = MAX_RETRY_WAIT,
        session: aiohttp.ClientSession | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not api_key:
            raise ValueError("TavilyProvider needs an API key")
        self._api_key = api_key
        self.url = base_url.rstrip("/") + "/search"
        self.search_depth = search_depth
        self.timeout = timeout
        self.retries = retries
        self._base_delay = retry_base_delay
        self.max_retry_wait = max_retry_wait
        self._session = session
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"TavilyProvider(url={self.url!r}, api_key=<redacted>)"

    def _redact(self, text: str) -> str:
        # Defence in depth: an error body or exception text must never carry the key onward.
        return text.replace(self._api_key, "[redacted]")

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Up to max_results hits for query; SearchError with a clear message otherwise."""
        payload = {
            "query": query,
            "max_results": max_results,
            "search_depth": self.search_depth,
            "include_answer": False,
            "include_raw_content": False,
            "include_images": False,
        }
        retrying = http_retrying(
            attempts=self.retries + 1,
            initial=self._base_delay,
            ceiling=self.max_retry_wait,
            sleep=self._sleep,
            retry_on=_RETRYABLE,
            log=log,
            redact=self._redact,
            message="web search attempt failed; retrying",
            provider=self.name,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._post(payload)
        except RetryableHttpError as exc:
            what = "rate-limited" if exc.status == 429 else "unavailable"
            raise SearchError(
                f"Tavily is {what} (HTTP {exc.status}) after {self.retries + 1} attempts; "
                "try again later.",
                kind="rate_limited" if exc.status == 429 else "unavailable",
                status=exc.status,
            ) from None
        except TimeoutError:
            raise SearchError(
                f"Tavily did not answer within {self.timeout:g}s "
                f"({self.retries + 1} attempts); try again later.",
                kind="timeout",
            ) from None
        except aiohttp.ClientConnectionError as exc:
            raise SearchError(
                f"Tavily is unreachable ({type(exc).__name__}); try again later.",
                kind="unreachable",
            ) from None
        except aiohttp.ClientError as exc:
            raise SearchError(
                f"The request to Tavily failed ({type(exc).__name__}).", kind="client_error"
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post(self, payload: dict[str, Any]) -> list[SearchResult]:
        headers = {"Authorization": f"Bearer {self._api_key}", "Content-Type": "application/json"}
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        # Searches are rare (a few per turn at most), so without an injected session each one
        # gets its own: nothing to close at shutdown, nothing to leak.
        if self._session is not None:
            return await self._request(self._session, payload, headers, timeout)
        async with aiohttp.ClientSession() as session:
            return await self._request(session, payload, headers, timeout)

    async def _request(
        self,
        session: aiohttp.ClientSession,
        payload: dict[str, Any],
        headers: Mapping[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> list[SearchResult]:
        async with session.post(self.url, json=payload, headers=headers, timeout=timeout) as resp:
            if resp.status == 429 or resp.status >= 500:
                raise RetryableHttpError(
                    f"HTTP {resp.status}", resp.status, retry_after(resp.headers)
                )
            if resp.status != 200:
                raise self._client_error(resp.status, await resp.text())
            try:
                data = await resp.json(content_type=None)
                parsed = _TavilyResponse.model_validate(data)
            except (ValueError, ValidationError, aiohttp.ContentTypeError):
                raise SearchError(
                    "Tavily sent a response that is not a search result list.", kind="bad_response"
                ) from None
        return [
            SearchResult(
                title=" ".join(hit.title.split()) or hit.url,
                url=hit.url,
                snippet=" ".join(hit.content.split()),
                published=hit.published_date or None,
            )
            for hit in parsed.results
        ]

    def _client_error(self, status: int, body: str) -> SearchError:
        kind, message = _CLIENT_ERRORS.get(status, ("http_error", "Tavily refused the search"))
        detail = _error_detail(body)
        text = f"{message} (HTTP {status})" + (f": {detail}" if detail else "") + "."
        if kind == "auth":
            text += " Check the API key in the environment; retrying will not help."
        return SearchError(self._redact(text), kind=kind, status=status)


def _error_detail(body: str) -> str:
    """Tavily's `{"detail": {"error": "..."}}` message, clipped; empty if absent."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    detail = data.get("detail") if isinstance(data, dict) else None
    if isinstance(detail, dict):
        detail = detail.get("error")
    return clip(str(detail), 300) if detail else ""
