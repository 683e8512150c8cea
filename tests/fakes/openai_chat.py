"""A fake OpenAI-compatible Chat Completions server (JSON and SSE streaming, faults) for the
real `openai` client: what Ollama, llama.cpp's server and vLLM speak at /v1/chat/completions.

``with FakeChat.running(tools=False) as chat: AsyncOpenAI(base_url=chat.base_url + "/v1")``.
Answers come from a queue (text, tool calls, errors, drops, garbled bodies, cut streams, hangs),
else the echo of the last user text (a tool result is echoed as "tool_result: …").
Usage is reported as the servers do: prompt and completion tokens, about 4 characters each.
"""

from __future__ import annotations

import copy
import json
import secrets
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes._server import FakeServer, sleep_or_closing


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


@dataclass
class ChatReply:
    text: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Streamed only: after this many chunks, cut the connection (drop) or send a garbled one.
    cut_after: int | None = None
    garble_after: int | None = None
    cut_before_done: bool = False  # drop after the usage chunk, before `data: [DONE]`
    # A reasoning model's thinking, before the answer, under the name its server uses
    # (DeepSeek and vLLM `reasoning_content`, Ollama and OpenRouter `reasoning`; both: vLLM).
    reasoning: str = ""
    reasoning_as: tuple[str, ...] = ("reasoning_content",)


@dataclass
class ChatError:
    status: int
    message: str = "error"
    code: str | None = None
    retry_after: float | None = None


@dataclass
class ChatFault:
    # drop | reset (dropped with an RST) | malformed | hang | answered_drop | error_chunk (these
    # two streamed)
    kind: str


ChatSpec = ChatReply | ChatError | ChatFault


class FakeChat(FakeServer):
    """POST /v1/chat/completions, GET /v1/models; `tools=False` / `images=False` refuse those
    with the 400 Ollama sends for a model without the capability; `stream_usage=False` is a
    server that ignores `stream_options.include_usage`: its streams carry no usage at all;
    `usage=False` one that counts nothing anywhere, its whole answers included."""

    def __init__(
        self,
        *,
        tools: bool = True,
        images: bool = True,
        stream_usage: bool = True,
        usage: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host=host, port=port)
        self.tools = tools
        self.images = images
        self.stream_usage = stream_usage and usage
        self.usage = usage
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._queue: deque[ChatSpec] = deque()
            self._requests: list[dict[str, Any]] = []
            self._changed()

    # -- scripting ---------------------------------------------------------------------------

    def enqueue(self, *specs: ChatSpec) -> None:
        with self._lock:
            self._queue.extend(specs)
            self._changed()

    def enqueue_text(self, text: str) -> None:
        self.enqueue(ChatReply(text=text))

    def enqueue_tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        self.enqueue(ChatReply(tool_calls=[(name, arguments)]))

    def enqueue_error(self, status: int, message: str = "error", **kw: Any) -> None:
        self.enqueue(ChatError(status, message, **kw))

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._requests)

    def wait_for_requests(self, n: int = 1, timeout: float = 5.0) -> list[dict[str, Any]]:
        return self.wait_until(
            lambda: copy.deepcopy(self._requests) if len(self._requests) >= n else None,
            timeout,
            f"{n} requests",
        )

    # -- HTTP --------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_get("/v1/models", self._models)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    def _refusal(self, body: dict[str, Any]) -> web.Response | None:
        model = body.get("model", "")
        if body.get("tools") and not self.tools:
            return _error(400, f"registry.ollama.ai/library/{model} does not support tools")
        has_image = any(
            isinstance(m.get("content"), list)
            and any(p.get("type") == "image_url" for p in m["content"])
            for m in body.get("messages") or []
        )
        if has_image and not self.images:
            return _error(400, f"{model} does not support images (image input)")
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(400, "could not parse the body")
        with self._lock:
            self._requests.append(
                {"body": body, "auth": request.headers.get("authorization"), "time": time.time()}
            )
            self._changed()
            spec = self._queue.popleft() if self._queue else None
        if (refused := self._refusal(body)) is not None:
            return refused
        spec = spec or ChatReply(text=f"echo: {_last_user_text(body)}")
        if isinstance(spec, ChatError):
            headers = {"retry-after": f"{spec.retry_after:g}"} if spec.retry_after else None
            return _error(spec.status, spec.message, spec.code, headers)
        if isinstance(spec, ChatFault):
            if spec.kind == "malformed":
                return web.Response(text='{"id": "chatcmpl-', content_type="application/json")
            if spec.kind == "hang":
                await sleep_or_closing(self, 3600)
            if spec.kind in ("answered_drop", "error_chunk"):
                return await self._stream_fault(request, spec.kind)
            if spec.kind == "reset":
                return self.reset_connection(request)
            return self.drop_connection(request)
        if body.get("stream"):
            return await self._stream(request, body, spec)
        whole = self._completion(body, spec)
        if not self.usage:
            del whole["usage"]
        return web.json_response(whole)

    async def _stream_fault(self, request: web.Request, kind: str) -> web.StreamResponse:
        """A 200 stream with no chunk: the connection dropped at once (`answered_drop`), or
        the error vLLM and llama.cpp's server send in place of the answer (`error_chunk`)."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if kind == "answered_drop":
            return self.drop_connection(request)
        error = {"error": {"message": "the model crashed", "type": "server_error", "code": 500}}
        await response.write(f"data: {json.dumps(error)}\n\n".encode())
        await response.write_eof()
        return response

    def _completion(self, body: dict[str, Any], spec: ChatReply) -> dict[str, Any]:
        calls = [
            {
                "id": "call_" + secrets.token_hex(6),
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for name, args in spec.tool_calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": spec.text}
        if spec.reasoning:
            message |= dict.fromkeys(spec.reasoning_as, spec.reasoning)
        if calls:
            message["tool_calls"] = calls
        prompt, completion = _tokens(body.get("messages")), _tokens(message)
        return {
            "id": "chatcmpl-" + secrets.token_hex(8),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    async def _stream(
        self, request: web.Request, body: dict[str, Any], spec: ChatReply
    ) -> web.StreamResponse:
        whole = self._completion(body, spec)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {k: whole[k] for k in ("id", "created", "model")} | {
            "object": "chat.completion.chunk"
        }
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        thought = spec.reasoning
        deltas += [
            dict.fromkeys(spec.reasoning_as, thought[i : i + 8]) for i in range(0, len(thought), 8)
        ]
        text = spec.text or ""
        deltas += [{"content": text[i : i + 8]} for i in range(0, len(text), 8)]
        for i, call in enumerate(whole["choices"][0]["message"].get("tool_calls") or []):
            fn = call["function"]
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
            args = fn["arguments"]
            deltas += [
                {"tool_calls": [{"index": i, "function": {"arguments": args[k : k + 10]}}]}
                for k in range(0, len(args), 10)
            ]
        for n, delta in enumerate(deltas):
            if spec.cut_after is not None and n >= spec.cut_after:
                return self.drop_connection(request)
            if spec.garble_after is not None and n >= spec.garble_after:
                await response.write(b'data: {"id": "chatcmpl-, "choices": [\n\n')
                await response.write(b"data: [DONE]\n\n")
                return response
            chunk = base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        finish = whole["choices"][0]["finish_reason"]
        last = base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        await response.write(f"data: {json.dumps(last)}\n\n".encode())
        if self.stream_usage and (body.get("stream_options") or {}).get("include_usage"):
            usage = base | {"choices": [], "usage": whole["usage"]}
            await response.write(f"data: {json.dumps(usage)}\n\n".encode())
        if spec.cut_before_done:
            return self.drop_connection(request)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _error(
    status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"error": {"message": message, "type": "api_error", "code": code}}
    return web.json_response(body, status=status, headers=headers)


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "tool":
            return f"tool_result: {message.get('content')}"
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
            return str(content)
    return ""


if __name__ == "__main__":
    FakeChat.main()
