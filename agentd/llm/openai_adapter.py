"""OpenAI-compatible model servers through the official `openai` SDK (the extra agentd[openai]):
Ollama, llama.cpp's server, vLLM, or a hosted service, by base URL and key.

Public API only (`chat.completions.create`, streamed or not), the SDK's retries off and agentd's
one policy around it. What the server cannot do is said: configured (`tools = false`,
`images = false`) it is refused before the call; detected (a 400 that says so) it is
remembered for the model and reported as `unsupported`, which a fallback chain moves past.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from agentd.config.models import ProviderConfig
from agentd.llm.anthropic_errors import StreamIncomplete
from agentd.llm.cut import answer_lost, prompt_chars, stream_taken, taken_unseen
from agentd.llm.openai_mapping import (
    Capabilities,
    ChunkFold,
    build_params,
    check,
    counted,
    json_mode,
    parse_response,
    unsupported,
    written_chars,
)
from agentd.llm.preload import preload
from agentd.llm.retrying import Sleep, call_with_retries
from agentd.llm.types import CutAttempt, LLMError, LLMRequest, LLMResponse

log = logging.getLogger("agentd.llm")
OnText = Callable[[str], Awaitable[None]]
RETRYABLE = frozenset(
    {"malformed", "timeout", "unreachable", "overloaded", "rate_limit", "server_error"}
)


def _body_text(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return (
                f"{error.get('code') or ''} {error.get('type') or ''} {error.get('message') or ''}"
            )
        return str(error)
    return str(body or exc)


def reason(exc: BaseException) -> str:
    sdk = sys.modules.get("openai")
    if isinstance(exc, StreamIncomplete | ValueError):
        return "malformed"
    if sdk is None:
        return "error"
    if isinstance(exc, sdk.APITimeoutError):
        return "timeout"
    if isinstance(exc, sdk.APIConnectionError):
        return "unreachable"
    if not isinstance(exc, sdk.APIStatusError):
        return "server_error" if isinstance(exc, sdk.APIError) else "error"  # error mid-stream
    status, text = exc.status_code, _body_text(exc).lower()
    if status == 402 or "insufficient_quota" in text or "billing" in text:
        return "billing"
    if status == 529 or "overloaded" in text:
        return "overloaded"
    if status == 429:
        return "rate_limit"
    if status in (408, 504):
        return "timeout"
    if status == 409 or status >= 500:
        return "server_error"
    if status in (401, 403):
        return "auth"
    if status == 400 and "support" in text and ("tool" in text or "image" in text):
        return "unsupported"
    return "bad_request"


def _retry_after(exc: BaseException) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        return float(headers["retry-after"]) if headers and headers.get("retry-after") else None
    except ValueError:
        return None


def _describe(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__} (HTTP {status})" if status else type(exc).__name__


class OpenAILLM:
    """One OpenAI-compatible provider: any of its models, agentd's retry policy around each."""

    def __init__(
        self,
        config: Any,  # the [llm] section: timeout, retries, max_tokens, …
        api_key: str,
        provider: ProviderConfig,
        name: str,
        *,
        sleep: Sleep | None = None,
    ) -> None:
        self.name = name
        self.model = config.model
        self._config = config
        self._provider = provider
        self._key = api_key
        self._sleep = sleep
        self._sdk = preload("openai", extra="openai")
        self._client: Any = None
        self._caps: dict[str, Capabilities] = {}

    def caps(self, model: str) -> Capabilities:
        return self._caps.setdefault(
            model, Capabilities(self._provider.tools, self._provider.images)
        )

    async def _get_client(self) -> Any:
        if self._client is None:
            try:
                sdk = await self._sdk.module()
            except ImportError as exc:
                raise LLMError(str(exc), retryable=False, reason="unsupported") from None
            self._client = sdk.AsyncOpenAI(
                # A local server takes any key; the SDK insists on one.
                api_key=self._key or "no-key",
                base_url=self._provider.base_url or None,
                max_retries=0,
                timeout=self._provider.timeout or self._config.timeout,
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def _create(
        self, params: dict[str, Any], model: str, as_tool: str | None = None
    ) -> LLMResponse:
        client = await self._get_client()
        answer = await client.chat.completions.create(**params)
        data = answer.to_dict(mode="json") if hasattr(answer, "to_dict") else None
        if not isinstance(data, dict) or not data.get("choices"):
            raise ValueError("the answer had no choices")
        choice = data["choices"][0]
        message = choice.get("message") or {}
        response = parse_response(
            message,
            choice.get("finish_reason"),
            data.get("usage"),
            data.get("model") or model,
            as_tool=as_tool,
        )
        # A server that sends no usage with its answer: billed by estimate, and says so.
        usage, guessed = counted(data.get("usage"), prompt_chars(params), written_chars(message))
        return response.model_copy(update={"usage": usage, "estimated": guessed})

    async def _stream(
        self, params: dict[str, Any], model: str, on_text: OnText, fold: ChunkFold
    ) -> LLMResponse:
        """The answer streamed into `fold`, which keeps what came for the ledger if it breaks."""
        client = await self._get_client()
        stream = await client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        fold.answered = True  # the SDK returns the stream once a 2xx answer came
        async with stream:
            async for chunk in stream:
                if fold.add(chunk.to_dict(mode="json")):
                    await on_text(fold.text)
        if fold.finish is None:  # the body ended before the model said it had finished
            raise StreamIncomplete("the answer stream ended without a finish reason")
        response = parse_response(fold.message(), fold.finish, fold.usage, fold.model or model)
        # A server that ignores `include_usage` sends no count: 0 tokens would let the model
        # past every [limits] budget, so the answer is billed by estimate, and says so.
        usage, guessed = fold.counted(prompt_chars(params))
        return response.model_copy(update={"usage": usage, "estimated": guessed})

    async def complete(
        self,
        req: LLMRequest,
        on_text: OnText | None = None,
        *,
        model: str | None = None,
        attempts: int | None = None,
        cut: list[CutAttempt] | None = None,
    ) -> LLMResponse:
        """As AnthropicLLM.complete: each attempt whose stream ended partway, or that the
        server took and never answered (stopped, timed out waiting, or the connection closed
        without an answer), goes to `cut`."""
        model = model or self.model
        label = f"{self.name}/{model}"
        caps = self.caps(model)
        check(req, caps, label, self.name)
        as_json = json_mode(req, caps)
        params = build_params(req, model, self._config.max_tokens, as_json)
        stream = on_text is not None and self._provider.streaming and not as_json

        made, cut = 0, cut if cut is not None else []

        async def call() -> LLMResponse:
            nonlocal made
            made += 1
            if not stream:
                as_tool = req.tool_choice if as_json else None
                return await self._create_billed(params, model, as_tool, label, made, cut)
            assert on_text is not None
            return await self._stream_billed(params, model, on_text, label, made, cut)

        try:
            response, tries = await call_with_retries(
                call,
                attempts=attempts if attempts is not None else self._config.retries + 1,
                base=self._config.retry_base_delay,
                ceiling=self._config.retry_max_wait,
                retryable=lambda exc: reason(exc) in RETRYABLE,
                retry_after=_retry_after,
                describe=_describe,
                sleep=self._sleep,
                model=label,
            )
        except LLMError:
            raise
        except Exception as exc:
            raise self._error(exc, req, caps, label) from None
        if not stream and on_text is not None and response.text:
            await on_text(response.text)  # a provider that does not stream: shown at the end
        notes = self._notes(req, label)
        return response.model_copy(update={"attempt": tries, "provider": self.name, **notes})

    async def _create_billed(
        self,
        params: dict[str, Any],
        model: str,
        as_tool: str | None,
        label: str,
        made: int,
        cut: list[CutAttempt],
    ) -> LLMResponse:
        """One attempt not streamed; one the server took and never answered goes to `cut`."""
        await self._get_client()  # a stop before the request leaves costs nothing
        try:
            return await self._create(params, model, as_tool)
        except asyncio.CancelledError:  # stopped while the server worked on it: billed
            cut.append(taken_unseen(label, made, params))
            raise
        except Exception as exc:
            if answer_lost(exc):  # taken: billed
                cut.append(taken_unseen(label, made, params))
            raise

    async def _stream_billed(
        self,
        params: dict[str, Any],
        model: str,
        on_text: OnText,
        label: str,
        made: int,
        cut: list[CutAttempt],
    ) -> LLMResponse:
        """One streamed attempt; one that ended partway goes to `cut`, and so does one the
        server took that ended before its first chunk (stopped, timed out, cut)."""
        await self._get_client()  # a stop before the request leaves costs nothing
        fold = ChunkFold()
        try:
            return await self._stream(params, model, on_text, fold)
        except (Exception, asyncio.CancelledError) as exc:
            broken = fold.cut(label, made, prompt_chars(params))
            if broken is None and stream_taken(exc, fold.answered):
                broken = taken_unseen(label, made, params)
            if broken is not None:
                cut.append(broken)
            raise

    def _error(
        self, exc: BaseException, req: LLMRequest, caps: Capabilities, label: str
    ) -> LLMError:
        why = reason(exc)
        if why == "unsupported":  # detected: remembered, so the next call says it up front
            text = _body_text(exc).lower()
            if "image" in text:
                caps.images = False
                return unsupported(label, "images", "the server said so")
            caps.tools = False
            return unsupported(label, "tool calls", "the server said so")
        return LLMError(
            f"the model call to {label} failed: {_describe(exc)}",
            retryable=why in RETRYABLE,
            status=getattr(exc, "status_code", None),
            reason=why,
            model=label,
        )

    @staticmethod
    def _notes(req: LLMRequest, label: str) -> dict[str, Any]:
        if not req.server_tools:
            return {}
        names = ", ".join(str(t.get("name") or t.get("type")) for t in req.server_tools)
        return {"notes": [f"{label} has no provider-side tools ({names}); answered without them"]}
