"""A fake Anthropic Messages API (JSON and SSE streaming) for the real anthropic client.

In-process: ``with FakeAnthropic.running() as llm: AsyncAnthropic(base_url=llm.base_url, ...)``;
as a process: ``python -m tests.fakes.anthropic --port N`` (prints the base URL), driven via
``/_fake/...``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import json
import secrets
import string
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes._server import FakeServer, sleep_or_closing
from tests.fakes.anthropic_cache import PromptCache, breakpoint_problem

_ALNUM = string.ascii_letters + string.digits
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_IMAGE_BYTES = 5 * 1024 * 1024
# HTTP status the real API uses for each error type.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
SENSITIVE_HEADERS = {"x-api-key", "authorization"}


def new_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(24))


def estimate_tokens(value: Any) -> int:
    """About four characters per token, like English prose."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return max(1, len(text) // 4)


# ============================================================================ response specs


# Model ids (and aliases) GET /v1/models/{id} knows; any other id gets the API's 404.
KNOWN_MODELS = {
    "claude-haiku-4-5": "Claude Haiku 4.5",
    "claude-sonnet-4-5": "Claude Sonnet 4.5",
    "claude-opus-4-1": "Claude Opus 4.1",
}


@dataclass
class Reply:
    """A successful model answer; streamed or not depending on the request."""

    content: list[dict[str, Any]]
    stop_reason: str | None = (
        None  # default: tool_use if a tool_use block is present, else end_turn
    )
    usage: dict[str, int] | None = None  # overrides the computed usage fields
    delay: float = 0.0  # seconds before answering
    # Mid-stream failure: after `fail_after` content deltas send `event: error` (or drop the
    # connection when stream_drop). A non-streaming request gets the error as an HTTP status.
    stream_error: dict[str, str] | None = None
    stream_drop: bool = False
    fail_after: int = 1
    # Stall after this many content deltas, sending nothing more until the client goes away
    # (a long answer the owner stops); logged as `stream_stall` with the answer's usage.
    stall_after: int | None = None


@dataclass
class ErrorReply:
    """An HTTP error answer with the real error body and headers."""

    status: int
    error_type: str
    message: str
    retry_after: float | None = None
    retry_after_ms: int | None = None
    should_retry: bool | None = None  # sets x-should-retry, which the SDK obeys
    delay: float = 0.0


@dataclass
class Drop:
    """Close the connection without answering (a network failure); `reset`: with an RST."""

    delay: float = 0.0
    reset: bool = False


@dataclass
class Malformed:
    """Answer 200 with a body that is not valid JSON."""

    delay: float = 0.0


@dataclass
class RawStream:
    """Answer a streamed request with exactly these events (shapes the API sends that the fake
    does not compose itself: citations, server tools, early ends, events out of order)."""

    events: list[dict[str, Any]]
    delay: float = 0.0
    drop: bool = False  # after the events, the connection cut, not ended


@dataclass
class Hang:
    """Accept the request and never answer (until the server stops): a hung upstream."""

    delay: float = 0.0


@dataclass
class Delay:
    """Queue item: wait this long, then answer with the next item (or the default)."""

    seconds: float


Spec = Reply | ErrorReply | Drop | Malformed | RawStream | Hang
Responder = Callable[[dict[str, Any]], Any]


def tool_use_block(
    name: str, input: dict[str, Any], tool_use_id: str | None = None
) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id or new_id("toolu_"), "name": name, "input": input}


def text_reply(text: str, **kwargs: Any) -> Reply:
    return Reply(content=[{"type": "text", "text": text}], **kwargs)


def tool_use_reply(
    name: str,
    input: dict[str, Any],
    tool_use_id: str | None = None,
    text_before: str | None = None,
    **kwargs: Any,
) -> Reply:
    blocks = [{"type": "text", "text": text_before}] if text_before else []
    return Reply(content=[*blocks, tool_use_block(name, input, tool_use_id)], **kwargs)


def to_spec(value: Any) -> Spec | None:
    """What a responder may return: str, content list, message-like dict, or a spec object."""
    if value is None or isinstance(value, Reply | ErrorReply | Drop | Malformed | RawStream | Hang):
        return value
    if isinstance(value, str):
        return text_reply(value)
    if isinstance(value, list):
        return Reply(content=value)
    if isinstance(value, dict) and "content" in value:
        return Reply(
            content=value["content"], stop_reason=value.get("stop_reason"), usage=value.get("usage")
        )
    raise TypeError(f"responder returned {value!r}; expected str, list, dict or a spec")


def last_user_text(body: dict[str, Any]) -> str:
    """Text of the last user message; tool results are rendered as 'tool_result: ...'.

    A trailing `<context>` block (agentd's per-call time and memories) is not the user's text.
    """
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        parts = []
        for block in content or []:
            if block.get("type") == "text" and not block.get("text", "").startswith("<context>"):
                parts.append(block.get("text", ""))
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = " ".join(b.get("text", "") for b in inner if b.get("type") == "text")
                parts.append(f"tool_result: {inner}")
        return "\n".join(parts)
    return ""


def echo_responder(body: dict[str, Any]) -> Spec:
    """The default answer: "echo: <last user text>"."""
    return text_reply(f"echo: {last_user_text(body)}")


class InvalidRequest(Exception):
    """400 invalid_request_error with the given message."""


# ===================================================================================== server


class FakeAnthropic(FakeServer):
    """Fake Anthropic Messages API server (POST /v1/messages, SSE streaming, errors)."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        strict: bool = True,
        cache_min_tokens: int | None = None,
        stream_chunk_chars: int = 8,
        stream_delay: float = 0.0,
        models_list: bool = True,
        model_route: bool = True,
        refuse_unknown_models: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        """api_key: only this key is accepted; strict: validate requests like the real API;
        cache_min_tokens: shortest cacheable prefix for every model (None: each model's own,
        e.g. 4096 for Haiku 4.5). Like a proxy or a compatible server: models_list=False has
        no GET /v1/models, model_route=False no GET /v1/models/{id};
        refuse_unknown_models answers a message for a model not in KNOWN_MODELS with the
        API's 404."""
        super().__init__(host=host, port=port)
        self.models_list = models_list
        self.model_route = model_route
        self.refuse_unknown_models = refuse_unknown_models
        self.api_key = api_key
        self.strict = strict
        self.cache = PromptCache(cache_min_tokens)
        self.stream_chunk_chars = max(1, stream_chunk_chars)
        self.stream_delay = stream_delay
        self._gate_waiters: set[asyncio.Event] = set()
        self.reset()

    def reset(self) -> None:
        """Empty the queue and recordings, forget the cache, release holds, drop the responder."""
        with self._lock:
            self._queue: deque[Spec | Delay] = deque()
            self._responder: Responder | None = None
            self._requests: list[dict[str, Any]] = []
            self._responses: list[dict[str, Any]] = []
            self.cache.clear()
            self._holding = False
            self._held = 0
            self._changed()
        self._call_in_loop(self._open_gate)

    # ======================================================================= scripting API

    def enqueue(self, *specs: Spec | Delay) -> None:
        """Queue raw specs (Reply, ErrorReply, Drop, Malformed, Delay) in order."""
        with self._lock:
            self._queue.extend(specs)
            self._changed()

    def enqueue_text(
        self, text: str, *, usage: dict[str, int] | None = None, stop_reason: str = "end_turn"
    ) -> None:
        self.enqueue(text_reply(text, usage=usage, stop_reason=stop_reason))

    def enqueue_tool_use(
        self,
        name: str,
        input: dict[str, Any],
        tool_use_id: str | None = None,
        text_before: str | None = None,
        *,
        usage: dict[str, int] | None = None,
    ) -> str:
        """Queue an answer calling one tool; returns the tool_use id."""
        reply = tool_use_reply(name, input, tool_use_id, text_before, usage=usage)
        self.enqueue(reply)
        return reply.content[-1]["id"]

    def enqueue_tool_uses(
        self,
        calls: list[tuple[str, dict[str, Any]] | dict[str, Any]],
        text_before: str | None = None,
        *,
        usage: dict[str, int] | None = None,
    ) -> list[str]:
        """Queue one answer with several tool_use blocks ((name, input) or block dicts)."""
        blocks = [{"type": "text", "text": text_before}] if text_before else []
        for call in calls:
            if isinstance(call, dict):
                blocks.append(tool_use_block(call["name"], call["input"], call.get("id")))
            else:
                blocks.append(tool_use_block(*call))
        self.enqueue(Reply(content=blocks, usage=usage))
        return [b["id"] for b in blocks if b["type"] == "tool_use"]

    def enqueue_error(
        self,
        status: int,
        error_type: str | None = None,
        message: str | None = None,
        *,
        retry_after: float | None = None,
        retry_after_ms: int | None = None,
        should_retry: bool | None = None,
    ) -> None:
        """Queue an HTTP error, e.g. (429, "rate_limit_error", retry_after=3) or (529,)."""
        if error_type is None:
            by_status = {v: k for k, v in ERROR_STATUS.items()}
            error_type = by_status.get(status, "api_error")
        self.enqueue(
            ErrorReply(
                status,
                error_type,
                message or error_type.replace("_", " ").capitalize(),
                retry_after,
                retry_after_ms,
                should_retry,
            )
        )

    def enqueue_stream_error(
        self,
        error_type: str = "overloaded_error",
        message: str = "Overloaded",
        *,
        partial_text: str = "Partial answer that will be cut",
        after_deltas: int = 1,
        drop: bool = False,
    ) -> None:
        """Queue a stream that sends some text, then `event: error` (or just drops, drop=True)."""
        self.enqueue(
            Reply(
                content=[{"type": "text", "text": partial_text}],
                stream_error={"type": error_type, "message": message},
                stream_drop=drop,
                fail_after=after_deltas,
            )
        )

    def enqueue_stream_stall(self, partial_text: str, *, after_deltas: int) -> None:
        """Queue a stream that sends `after_deltas` pieces of the text, then nothing more until
        the client goes away (a streamed request; a plain one gets the whole answer)."""
        text = [{"type": "text", "text": partial_text}]
        self.enqueue(Reply(content=text, stall_after=after_deltas))

    def enqueue_delay(self, seconds: float) -> None:
        """The next answer comes `seconds` late (use with a client timeout)."""
        self.enqueue(Delay(seconds))

    def enqueue_drop(self) -> None:
        """The next request has its connection closed without an answer."""
        self.enqueue(Drop())

    def enqueue_hang(self) -> None:
        """The next request is accepted and never answered (use with a client timeout)."""
        self.enqueue(Hang())

    def enqueue_malformed(self) -> None:
        """The next request gets 200 with a body that is not JSON."""
        self.enqueue(Malformed())

    def set_responder(self, responder: Responder | None) -> None:
        """responder(request_body) -> str | content list | dict | spec | None (None: echo).

        Used when the queue is empty; runs on the server thread."""
        with self._lock:
            self._responder = responder

    def hold(self) -> None:
        """Requests from now on wait (after being recorded) until release()."""
        with self._lock:
            self._holding = True

    def release(self) -> None:
        """Let every held request proceed and stop holding new ones."""
        with self._lock:
            self._holding = False
            self._changed()
        self._call_in_loop(self._open_gate)

    # ===================================================================== inspection API

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request: path, body (parsed JSON), headers (keys redacted), api_key_present,
        stream, time."""
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def responses(self) -> list[dict[str, Any]]:
        """What each answered request got: kind (message/error/drop/...), status, body/usage."""
        with self._lock:
            return copy.deepcopy(self._responses)

    @property
    def held(self) -> int:
        """How many requests are waiting on hold() right now."""
        with self._lock:
            return self._held

    @property
    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    def _requests_pred(self, n: int) -> Callable[[], list[dict[str, Any]] | None]:
        return lambda: copy.deepcopy(self._requests) if len(self._requests) >= n else None

    def wait_for_requests(self, n: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Block until at least n requests arrived; return them all."""
        return self.wait_until(self._requests_pred(n), timeout, f"{n} requests")

    async def wait_for_requests_async(
        self, n: int = 1, timeout: float = 5.0
    ) -> list[dict[str, Any]]:
        return await self.wait_until_async(self._requests_pred(n), timeout, f"{n} requests")

    def wait_for_held(self, n: int = 1, timeout: float = 5.0) -> None:
        """Block until n requests are waiting on hold()."""
        self.wait_until(lambda: self._held >= n, timeout, f"{n} held requests")

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "queued": len(self._queue),
                "held": self._held,
                "holding": self._holding,
                "request_count": len(self._requests),
                "responses": copy.deepcopy(self._responses),
            }

    # ==================================================================== HTTP plumbing

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._handle_messages)
        app.router.add_post("/v1/messages/count_tokens", self._handle_count_tokens)
        if self.models_list:
            app.router.add_get("/v1/models", self._handle_models)
        if self.model_route:
            app.router.add_get("/v1/models/{model_id}", self._handle_models)
        app.router.add_route("*", "/_fake/{name}", self._handle_control)

    def _on_loop_started(self) -> None:
        self._gate_waiters = set()

    def _on_closing(self) -> None:
        self._open_gate()

    def _open_gate(self) -> None:
        for event in list(self._gate_waiters):
            event.set()

    @staticmethod
    def error_response(
        status: int,
        error_type: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        request_id = new_id("req_")
        body = {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": request_id,
        }
        return web.json_response(
            body, status=status, headers={"request-id": request_id, **(headers or {})}
        )

    def _check_headers(self, request: web.Request) -> web.Response | None:
        key = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        # anthropic 2.x sends the api_key as "Authorization: Bearer"; 1.x used x-api-key.
        if key is None and auth.lower().startswith("bearer "):
            key = auth[7:]
        if not key:
            return self.error_response(401, "authentication_error", "x-api-key header is required")
        if self.api_key is not None and key != self.api_key:
            return self.error_response(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return self.error_response(
                400, "invalid_request_error", "anthropic-version: header is required"
            )
        return None

    def _record(self, request: web.Request, body: Any) -> None:
        headers = {
            k.lower(): ("[redacted]" if k.lower() in SENSITIVE_HEADERS else v)
            for k, v in request.headers.items()
        }
        entry = {
            "path": request.path,
            "body": body,
            "headers": headers,
            "api_key_present": bool(
                request.headers.get("x-api-key") or request.headers.get("authorization")
            ),
            "stream": bool(isinstance(body, dict) and body.get("stream")),
            "time": time.time(),
        }
        with self._lock:
            self._requests.append(entry)
            self._changed()

    def _log_response(self, kind: str, status: int, **extra: Any) -> None:
        with self._lock:
            self._responses.append({"kind": kind, "status": status, "time": time.time(), **extra})
            self._changed()

    async def _read_body(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            return json.loads(raw)
        except ValueError:
            return None

    async def _handle_messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_body(request)
        self._record(request, body)
        if (denied := self._check_headers(request)) is not None:
            return denied
        if not isinstance(body, dict):
            return self.error_response(
                400, "invalid_request_error", "There was an error parsing the body"
            )
        if self.strict:
            try:
                validate_request(body)
            except InvalidRequest as e:
                self._log_response("error", 400, error=str(e))
                return self.error_response(400, "invalid_request_error", str(e))
        if self.refuse_unknown_models and body.get("model") not in KNOWN_MODELS:
            return self.error_response(404, "not_found_error", f"model: {body.get('model')}")

        if not await self._pass_gate(request):
            return web.Response(status=499)  # the client went away while held; nothing consumed

        spec, delay = self._next_spec(body)
        delay += getattr(spec, "delay", 0.0)
        if delay:
            await sleep_or_closing(self, delay)
        if isinstance(spec, Drop):
            self._log_response("drop", 0)
            return self.reset_connection(request) if spec.reset else self.drop_connection(request)
        if isinstance(spec, Malformed):
            self._log_response("malformed", 200)
            return web.Response(text='{"id": "msg_01', content_type="application/json")
        if isinstance(spec, Hang):
            self._log_response("hang", 0)
            await sleep_or_closing(self, 3600)
            return self.drop_connection(request)
        if isinstance(spec, RawStream):
            return await self._raw_stream(request, spec)
        if isinstance(spec, ErrorReply):
            return self._error_reply(spec)
        assert isinstance(spec, Reply)
        if spec.stream_error is not None and not body.get("stream"):
            err = spec.stream_error
            return self._error_reply(
                ErrorReply(ERROR_STATUS.get(err["type"], 500), err["type"], err["message"])
            )
        message = self._message(body, spec)
        if body.get("stream"):
            return await self._stream(request, message, spec)
        self._log_response("message", 200, body=message)
        return web.json_response(message, headers={"request-id": new_id("req_")})

    def _error_reply(self, spec: ErrorReply) -> web.Response:
        headers: dict[str, str] = {}
        if spec.retry_after is not None:
            headers["retry-after"] = f"{spec.retry_after:g}"
        if spec.retry_after_ms is not None:
            headers["retry-after-ms"] = str(spec.retry_after_ms)
        if spec.should_retry is not None:
            headers["x-should-retry"] = "true" if spec.should_retry else "false"
        self._log_response("error", spec.status, error_type=spec.error_type, headers=headers)
        return self.error_response(spec.status, spec.error_type, spec.message, headers)

    @staticmethod
    def _connected(request: web.Request) -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    async def _pass_gate(self, request: web.Request) -> bool:
        """Wait while held; False if the client disconnected meanwhile (then it stops being
        held within the 0.5 s re-check, so a test can wait for `held` to drop, not sleep)."""
        with self._lock:
            if not self._holding:
                return True
            self._held += 1
            self._changed()
        try:
            while self._holding and not self._closing and self._connected(request):
                event = asyncio.Event()
                self._gate_waiters.add(event)
                try:
                    # The timeout re-checks the flags in case a wake-up raced with hold().
                    await asyncio.wait_for(event.wait(), 0.5)
                except TimeoutError:
                    pass
                finally:
                    self._gate_waiters.discard(event)
        finally:
            with self._lock:
                self._held -= 1
                self._changed()
        return self._connected(request)

    def _next_spec(self, body: dict[str, Any]) -> tuple[Spec, float]:
        delay = 0.0
        with self._lock:
            while self._queue:
                item = self._queue.popleft()
                if isinstance(item, Delay):
                    delay += item.seconds
                    continue
                self._changed()
                return item, delay
            responder = self._responder
        if responder is not None:
            try:
                spec = to_spec(responder(body))
            except Exception:
                # A broken responder is a test bug: make it loud, as a 500 with the traceback.
                return ErrorReply(500, "api_error", traceback.format_exc()), delay
            if spec is not None:
                return spec, delay
        return echo_responder(body), delay

    def _message(self, body: dict[str, Any], spec: Reply) -> dict[str, Any]:
        content = copy.deepcopy(spec.content)
        stop = spec.stop_reason or (
            "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
        )
        usage = {**self._usage(body), "output_tokens": estimate_tokens(content)}
        usage.update(spec.usage or {})
        return {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-haiku-4-5"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def _usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """Input tokens and prompt caching by the documented rules (tests/fakes/anthropic_cache)."""
        return self.cache.usage(body)

    async def _stream(
        self, request: web.Request, message: dict[str, Any], spec: Reply
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": new_id("req_"),
            }
        )
        await response.prepare(request)
        try:
            return await self._write_events(request, response, message, spec)
        except ConnectionResetError:
            # The client went away mid-stream (killed, or it stopped reading): not an error here.
            self._log_response("client_gone", 200, stream=True)
            return response

    async def _write_events(
        self,
        request: web.Request,
        response: web.StreamResponse,
        message: dict[str, Any],
        spec: Reply,
    ) -> web.StreamResponse:
        async def send(event: str, data: dict[str, Any]) -> None:
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
            if self.stream_delay:
                await asyncio.sleep(self.stream_delay)

        start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
        start["usage"] = {**message["usage"], "output_tokens": 1}
        await send("message_start", {"type": "message_start", "message": start})
        await send("ping", {"type": "ping"})
        deltas = 0
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                opening = {"type": "text", "text": ""}
                chunks = [{"type": "text_delta", "text": c} for c in self._chunks(block["text"])]
            elif block["type"] == "tool_use":
                opening = {**block, "input": {}}
                # The API opens with an empty partial_json, then the JSON in pieces.
                raw = json.dumps(block["input"])
                chunks = [
                    {"type": "input_json_delta", "partial_json": c}
                    for c in ["", *self._chunks(raw)]
                ]
            else:
                opening, chunks = block, []
            await send(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
            )
            for delta in chunks:
                await send(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
                deltas += 1
                if spec.stream_error is not None and deltas >= spec.fail_after:
                    return await self._fail_stream(request, response, spec, send)
                if spec.stall_after is not None and deltas >= spec.stall_after:
                    return await self._stall(request, response, message)
            await send("content_block_stop", {"type": "content_block_stop", "index": index})
        await send(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        )
        await send("message_stop", {"type": "message_stop"})
        await response.write_eof()
        self._log_response("message", 200, body=message, stream=True)
        return response

    async def _raw_stream(self, request: web.Request, spec: RawStream) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        await response.prepare(request)
        for event in spec.events:
            kind = event.get("type", "message")
            await response.write(f"event: {kind}\ndata: {json.dumps(event)}\n\n".encode())
        if spec.drop:
            self._log_response("raw_stream_drop", 200, events=len(spec.events))
            return self.drop_connection(request)
        await response.write_eof()
        self._log_response("raw_stream", 200, events=len(spec.events))
        return response

    async def _fail_stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        spec: Reply,
        send: Callable[[str, dict[str, Any]], Any],
    ) -> web.StreamResponse:
        assert spec.stream_error is not None
        if spec.stream_drop:
            self._log_response("stream_drop", 200)
            if request.transport is not None:
                request.transport.abort()
            return response
        error = {"type": "error", "error": spec.stream_error, "request_id": new_id("req_")}
        await send("error", error)
        await response.write_eof()
        self._log_response("stream_error", 200, error_type=spec.stream_error["type"])
        return response

    async def _stall(
        self, request: web.Request, response: web.StreamResponse, message: dict[str, Any]
    ) -> web.StreamResponse:
        self._log_response("stream_stall", 200, usage=message["usage"])
        while self._connected(request) and not self._closing:
            await sleep_or_closing(self, 0.05)
        self._log_response("client_gone", 200, stream=True)
        return response

    def _chunks(self, text: str) -> list[str]:
        size = self.stream_chunk_chars
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]

    async def _handle_count_tokens(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_body(request)
        self._record(request, body)
        if (denied := self._check_headers(request)) is not None:
            return denied
        if not isinstance(body, dict):
            return self.error_response(
                400, "invalid_request_error", "There was an error parsing the body"
            )
        parts = [body.get("tools"), body.get("system"), body.get("messages")]
        return web.json_response({"input_tokens": estimate_tokens([p for p in parts if p])})

    async def _handle_models(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._check_headers(request)) is not None:
            return denied
        models = [
            {
                "type": "model",
                "id": model_id,
                "display_name": name,
                "created_at": "2025-10-01T00:00:00Z",
            }
            for model_id, name in KNOWN_MODELS.items()
        ]
        if "model_id" in request.match_info:
            wanted = request.match_info["model_id"]
            found = next((m for m in models if m["id"] == wanted), None)
            if found is None:  # what the real API answers for an unknown model id
                return self.error_response(404, "not_found_error", f"model: {wanted}")
            return web.json_response(found)
        return web.json_response(
            {
                "data": models,
                "has_more": False,
                "first_id": models[0]["id"],
                "last_id": models[-1]["id"],
            }
        )

    # ================================================================== /_fake control

    async def _handle_control(self, request: web.Request) -> web.StreamResponse:
        """JSON control endpoints for a fake running in another process."""
        name = request.match_info["name"]
        body: dict[str, Any] = {}
        if request.method == "POST" and request.can_read_body:
            body = await request.json()
        query = dict(request.query)
        try:
            if name == "requests":
                return web.json_response(self.requests)
            if name == "state":
                return web.json_response(self.state())
            if name == "wait_requests":
                n = int(query.get("count", 1))
                timeout = float(query.get("timeout", 5))
                return web.json_response(await self.wait_for_requests_async(n, timeout))
            if name == "hold":
                self.hold()
            elif name == "release":
                self.release()
            elif name == "reset":
                self.reset()
            elif name == "advance":  # let cache entries age: {"seconds": 600}
                self.cache.advance(float(body["seconds"]))
            elif name == "enqueue":
                result = self._control_enqueue(body)
                return web.json_response({"ok": True, "result": result})
            else:
                return web.json_response({"error": f"unknown control endpoint {name}"}, status=404)
        except TimeoutError as e:
            return web.json_response({"error": str(e)}, status=408)
        except (KeyError, TypeError, ValueError) as e:
            return web.json_response({"error": f"{type(e).__name__}: {e}"}, status=400)
        return web.json_response({"ok": True})

    def _control_enqueue(self, body: dict[str, Any]) -> Any:
        """{"kind": text|tool_use|tool_uses|error|stream_error|delay|drop|malformed|reply, ...}."""
        kind = body.pop("kind")
        if kind == "text":
            return self.enqueue_text(**body)
        if kind == "tool_use":
            return self.enqueue_tool_use(**body)
        if kind == "tool_uses":
            return self.enqueue_tool_uses(**body)
        if kind == "error":
            return self.enqueue_error(**body)
        if kind == "stream_error":
            return self.enqueue_stream_error(**body)
        if kind == "delay":
            return self.enqueue_delay(body["seconds"])
        if kind == "drop":
            return self.enqueue_drop()
        if kind == "malformed":
            return self.enqueue_malformed()
        if kind == "hang":
            return self.enqueue_hang()
        if kind == "raw_stream":
            return self.enqueue(RawStream(body["events"]))
        if kind == "reply":
            return self.enqueue(Reply(**body))
        raise ValueError(f"unknown kind {kind!r}")

    @classmethod
    def add_cli_arguments(cls, parser: Any) -> None:
        parser.add_argument("--api-key", default=None, help="accept only this API key")
        parser.add_argument("--cache-min-tokens", type=int, default=None)
        parser.add_argument("--stream-delay", type=float, default=0.0)

    @classmethod
    def cli_kwargs(cls, args: Any) -> dict[str, Any]:
        return {
            "api_key": args.api_key,
            "cache_min_tokens": args.cache_min_tokens,
            "stream_delay": args.stream_delay,
        }


# ================================================================================= validation


def validate_request(body: dict[str, Any]) -> None:
    """Raise InvalidRequest with the real API's wording for the mistakes clients make."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidRequest("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise InvalidRequest("max_tokens: Field required")
    if max_tokens < 1:
        raise InvalidRequest("max_tokens: Input should be greater than or equal to 1")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Field required")
    if not messages:
        raise InvalidRequest("messages: at least one message is required")

    marks = 0
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        if not isinstance(system, list):
            raise InvalidRequest("system: Input should be a valid string or list of text blocks")
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise InvalidRequest(f"system.{i}.type: Input should be 'text'")
            marks += "cache_control" in block

    names = set()
    for i, tool in enumerate(body.get("tools") or []):
        if "name" not in tool:
            raise InvalidRequest(f"tools.{i}.custom.name: Field required")
        if "type" not in tool and "input_schema" not in tool:
            raise InvalidRequest(f"tools.{i}.custom.input_schema: Field required")
        if tool["name"] in names:
            raise InvalidRequest("tools: Tool names must be unique.")
        names.add(tool["name"])
        marks += "cache_control" in tool

    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise InvalidRequest(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        final_assistant = i == last and message["role"] == "assistant"
        if content in ("", []) and not final_assistant:
            raise InvalidRequest(
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise InvalidRequest(f"messages.{i}.content: Input should be a valid list")
        for k, block in enumerate(content):
            marks += isinstance(block, dict) and "cache_control" in block
            _validate_block(block, f"messages.{i}.content.{k}")

    for i, message in enumerate(messages):
        uses = _ids(message, "tool_use", "id") if message["role"] == "assistant" else []
        if uses and i < last:
            nxt = messages[i + 1]
            results = _ids(nxt, "tool_result", "tool_use_id") if nxt["role"] == "user" else []
            missing = [u for u in uses if u not in results]
            if missing:
                raise InvalidRequest(
                    f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
        if message["role"] == "user" and isinstance(message.get("content"), list):
            prev = messages[i - 1] if i > 0 else None
            known = _ids(prev, "tool_use", "id") if prev and prev["role"] == "assistant" else []
            for k, block in enumerate(message["content"]):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in known:
                    raise InvalidRequest(
                        f"messages.{i}.content.{k}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` "
                        "block must have a corresponding `tool_use` block in the previous message."
                    )

    if (problem := breakpoint_problem(body)) is not None:
        raise InvalidRequest(problem)
    if marks > 4:
        raise InvalidRequest(
            f"A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        )


def _ids(message: dict[str, Any], block_type: str, key: str) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b.get(key) for b in content if isinstance(b, dict) and b.get("type") == block_type]


def _validate_block(block: Any, where: str) -> None:
    if not isinstance(block, dict) or "type" not in block:
        raise InvalidRequest(f"{where}.type: Field required")
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise InvalidRequest(f"{where}.text.text: Field required")
        if not block["text"]:
            raise InvalidRequest("messages: text content blocks must be non-empty")
    elif kind == "tool_use":
        if not isinstance(block.get("input"), dict):
            raise InvalidRequest(f"{where}.tool_use.input: Input should be a valid dictionary")
    elif kind == "image":
        source = block.get("source") or {}
        if source.get("type") == "base64":
            if source.get("media_type") not in IMAGE_TYPES:
                raise InvalidRequest(
                    f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', "
                    "'image/png', 'image/gif' or 'image/webp'"
                )
            try:
                size = len(base64.b64decode(source.get("data") or "", validate=True))
            except (binascii.Error, ValueError):
                raise InvalidRequest(
                    f"{where}.image.source.base64.data: invalid base64 data"
                ) from None
            if size > MAX_IMAGE_BYTES:
                raise InvalidRequest(
                    f"{where}.image.source.base64: image exceeds 5 MB maximum: "
                    f"{size} bytes > {MAX_IMAGE_BYTES} bytes"
                )


__all__ = [
    "Delay",
    "Drop",
    "ErrorReply",
    "FakeAnthropic",
    "Hang",
    "Malformed",
    "RawStream",
    "Reply",
    "echo_responder",
    "last_user_text",
    "text_reply",
    "tool_use_block",
    "tool_use_reply",
    "validate_request",
]

if __name__ == "__main__":
    FakeAnthropic.main()
