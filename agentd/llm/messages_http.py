"""The Messages API over HTTP with aiohttp, which the daemon has loaded already for Telegram.

Why not the SDK: agentd sends one request (`POST /v1/messages`, with or without `stream`),
already serialised, and folds the events itself (anthropic_stream.py). Importing the SDK for
that cost more CPU than anything else before the first answer (~1.7 s whole, ~0.6 s even with
its re-exports made lazy by patching its import), and the lazy path depended on the SDK's
internal layout, which changed under users within days. Here only the public wire format is
used: the one documented at docs.anthropic.com (headers, error bodies, server-sent events).

Errors keep what the retry policy needs: the HTTP status, the API's error type, Retry-After.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from pydantic_core import from_json

API_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"
MAX_ERROR_BODY = 64 * 1024  # an error page larger than this is not read whole


class APIStatusError(Exception):
    """The API answered with an error: an HTTP status, or `event: error` inside a stream (200)."""

    def __init__(
        self, status: int, error_type: str, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{error_type}: {message}" if message else error_type)
        self.status_code = status
        self.error_type = error_type
        self.retry_after = retry_after


class APIConnectionError(Exception):
    """No answer: the connection failed, dropped or timed out."""


def _retry_after(headers: Any) -> float | None:
    try:
        if headers.get("retry-after-ms"):
            return float(headers["retry-after-ms"]) / 1000
        if headers.get("retry-after"):
            return float(headers["retry-after"])
    except ValueError:
        return None  # an HTTP date: the backoff is good enough
    return None


def _error_from_body(status: int, body: bytes, retry_after: float | None) -> APIStatusError:
    """The API's `{"type": "error", "error": {"type", "message", "details"}}`, or whatever came."""
    try:
        error = json.loads(body).get("error") or {}
        error_type = str(error.get("type") or f"http_{status}")
        code = (error.get("details") or {}).get("error_code")
        if isinstance(code, str) and code:  # the finer cause, e.g. a spend limit behind a 429
            error_type = code
        message = str(error.get("message") or "")
    except (ValueError, AttributeError):
        error_type, message = f"http_{status}", ""  # a proxy's HTML page: the status says enough
    return APIStatusError(status, error_type, message[:500], retry_after)


class MessagesClient:
    """One aiohttp session for the process; `create` and `stream` are the two calls made."""

    def __init__(self, api_key: str, base_url: str | None, timeout: float) -> None:
        self._url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"
        self._headers = {
            "x-api-key": api_key,
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": "application/json",
        }
        # As the SDK's timeout: each of connecting and every read may take this long; a long
        # answer that keeps streaming is not cut.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def create(self, body: bytes) -> Any:
        """The whole answer as JSON (ValueError when the body is not JSON)."""
        try:
            async with self._client().post(self._url, data=body, headers=self._headers) as resp:
                await _raise_for_status(resp)
                return from_json(await resp.read())
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise APIConnectionError(type(exc).__name__) from None

    async def stream(self, body: bytes) -> AsyncIterator[dict[str, Any]]:
        """Each server-sent event's JSON, in order; `event: error` raises APIStatusError."""
        try:
            async with self._client().post(self._url, data=body, headers=self._headers) as resp:
                await _raise_for_status(resp)
                async for event, data in _server_sent_events(resp.content):
                    if event == "ping" or event is None or not data:
                        continue
                    if event == "error":
                        raise _error_from_body(200, data.encode(), None)
                    yield from_json(data)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise APIConnectionError(type(exc).__name__) from None


async def _raise_for_status(resp: aiohttp.ClientResponse) -> None:
    if resp.status < 400:
        return
    body = await resp.content.read(MAX_ERROR_BODY)
    raise _error_from_body(resp.status, body, _retry_after(resp.headers))


async def _server_sent_events(
    content: aiohttp.StreamReader,
) -> AsyncIterator[tuple[str | None, str]]:
    """(event, data) per event of a text/event-stream body, as the HTML standard defines it:
    `field: value` lines (one leading space dropped), data lines joined by newlines, a blank
    line ends the event, lines starting with ":" are comments."""
    event: str | None = None
    data: list[str] = []
    async for raw in content:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data or event is not None:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
    if data:  # a body that ends without the final blank line
        yield event, "\n".join(data)
