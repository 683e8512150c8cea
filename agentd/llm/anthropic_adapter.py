"""Claude through the Messages API (R-LLM-2): requests out, neutral types back.

The HTTP client is messages_http.py (aiohttp, the public wire format); this module builds the
body, folds the answer and decides what is worth a retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_core import to_json
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
)

from agentd.config import LLMConfig
from agentd.llm.anthropic_stream import MessageFold, StreamIncomplete
from agentd.llm.messages_http import APIConnectionError, APIStatusError, MessagesClient
from agentd.llm.types import (
    ContentBlock,
    ImageBlock,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    OpaqueBlock,
    TextBlock,
    ToolUseBlock,
    Usage,
)
from agentd.net.retry import honour_retry_after

log = logging.getLogger("agentd.llm")
Sleep = Callable[[float], Awaitable[None]]
OnText = Callable[[str], Awaitable[None]]


def _retry_after(exc: BaseException) -> float | None:
    return exc.retry_after if isinstance(exc, APIStatusError) else None


def is_retryable(exc: BaseException) -> bool:
    """429 (except spend limits), 408, 409, 5xx and 529, timeouts and dropped connections."""
    if isinstance(exc, APIConnectionError | ValueError | StreamIncomplete):
        return True  # a dropped stream or a malformed body: transient
    if isinstance(exc, APIStatusError):
        if "spend_limit" in exc.error_type:  # waiting does not raise a spend limit
            return False
        if exc.status_code == 200:  # an `event: error` in the middle of a stream
            return True
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return False


def _block_to_api(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, OpaqueBlock):
        return block.raw
    if isinstance(block, TextBlock):
        return block.model_dump(exclude_none=True)
    if isinstance(block, ImageBlock):
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": block.media_type, "data": block.data},
        }
    return block.model_dump()


def _message_to_api(message: Message, marker: dict[str, Any], context: str) -> dict[str, Any]:
    blocks = (
        [{"type": "text", "text": message.content}]
        if isinstance(message.content, str)
        else [_block_to_api(b) for b in message.content]
    )
    if message.cache and blocks:
        brief = {"type": "ephemeral", "ttl": "5m"}  # after every 1-hour one, as the API requires
        blocks[-1] = {**blocks[-1], "cache_control": brief if message.cache_brief else marker}
    if context:  # after the breakpoint: per-call text never enters a cached prefix
        blocks.append({"type": "text", "text": context})
    return {"role": message.role, "content": blocks}


def build_params(
    req: LLMRequest, model: str, max_tokens: int, cache_ttl: str = "5m"
) -> dict[str, Any]:
    """The Messages API body, with cache breakpoints where the request marks them.

    Tools come first in the cached prefix, so the stable system block's breakpoint covers them
    too: no breakpoint of their own (at most 4 per request; R-LLM-4).
    """
    marker: dict[str, Any] = {"type": "ephemeral"} | ({"ttl": "1h"} if cache_ttl == "1h" else {})
    last = len(req.messages) - 1
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": req.max_tokens or max_tokens,
        "messages": [
            _message_to_api(m, marker, req.context if i == last else "")
            for i, m in enumerate(req.messages)
        ],
    }
    if req.system:
        params["system"] = [
            {"type": "text", "text": b.text} | ({"cache_control": marker} if b.cache else {})
            for b in req.system
        ]
    if req.tools or req.server_tools:
        # The ToolSpec models go in as they are: the body is written by pydantic-core, which
        # serialises them without a dict per tool per call.
        params["tools"] = [*req.tools, *req.server_tools]
    if req.tool_choice:
        params["tool_choice"] = {"type": "tool", "name": req.tool_choice}
    return params


def _without_nulls(value: Any) -> Any:
    """What the SDK's `model_dump(exclude_none=True)` gave: the API's nulls left out."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _parse_block(block: dict[str, Any]) -> ContentBlock | None:
    kind = block.get("type")
    if kind == "text":
        citations = block.get("citations")
        return TextBlock(
            text=block.get("text", ""),
            citations=[_without_nulls(c) for c in citations] if citations else None,
        )
    if kind == "tool_use":
        return ToolUseBlock(id=block["id"], name=block["name"], input=block.get("input") or {})
    if kind in ("server_tool_use", "web_search_tool_result"):
        return OpaqueBlock(raw=_without_nulls(block))
    return None  # thinking and other blocks are not used by agentd


def _parse_response(msg: dict[str, Any], attempt: int = 1) -> LLMResponse:
    usage = msg.get("usage") or {}
    split = usage.get("cache_creation") or {}  # absent from older API versions and proxies
    return LLMResponse(
        attempt=attempt,
        model=msg["model"],
        content=[b for b in map(_parse_block, msg.get("content") or []) if b is not None],
        stop_reason=msg.get("stop_reason"),
        usage=Usage(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
            cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
            cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
            cache_write_1h_tokens=split.get("ephemeral_1h_input_tokens") or 0,
        ),
    )


def _describe(exc: BaseException) -> str:
    # Never echo request bodies or headers: the message and status are enough for the owner.
    if isinstance(exc, APIStatusError):  # the API's own name for it: overloaded_error, …
        return f"{exc.error_type} (HTTP {exc.status_code})"
    return type(exc).__name__


class AnthropicLLM:
    """Claude over HTTP, with our own capped tenacity policy."""

    def __init__(
        self,
        config: LLMConfig,
        api_key: str,
        *,
        sleep: Sleep | None = None,
    ) -> None:
        self.model = config.model
        self.background_model = config.background_model or config.model
        self._config = config
        self._sleep = sleep
        self._base = config.retry_base_delay
        self._client = MessagesClient(api_key, config.base_url or None, config.timeout)

    async def close(self) -> None:
        await self._client.close()

    async def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        # The body is serialised once, by pydantic-core.
        message = await self._client.create(to_json(params))
        if not isinstance(message, dict):  # a proxy's page parsed as JSON
            raise ValueError("the answer was not a JSON object")
        return message

    async def _stream(self, params: dict[str, Any], on_text: OnText) -> dict[str, Any]:
        """Stream the answer, reporting the text so far; return the final message."""
        fold = MessageFold()
        async for event in self._client.stream(to_json({**params, "stream": True})):
            text = fold.add(event)
            if text is not None:
                await on_text(text)
        return fold.result()

    async def complete(self, req: LLMRequest, on_text: OnText | None = None) -> LLMResponse:
        """One model answer, retried on transient errors; LLMError when it cannot be had.

        With on_text, the answer is streamed and on_text gets the text written so far.
        """
        model = self.model if req.purpose == "turn" else self.background_model
        params = build_params(req, model, self._config.max_tokens, self._config.cache_ttl)
        kwargs: dict[str, Any] = {
            "stop": stop_after_attempt(self._config.retries + 1),
            "wait": honour_retry_after(self._base, self._config.retry_max_wait, _retry_after),
            "retry": retry_if_exception(is_retryable),
            "reraise": True,
            "before_sleep": self._log_retry,
        }
        if self._sleep is not None:
            kwargs["sleep"] = self._sleep
        started = time.perf_counter()
        tries = 0
        try:
            async for attempt in AsyncRetrying(**kwargs):
                tries = attempt.retry_state.attempt_number
                with attempt:
                    if on_text is None:
                        message = await self._create(params)
                    else:
                        message = await self._stream(params, on_text)
        except (APIConnectionError, ValueError, StreamIncomplete) as exc:
            # A dropped connection or a cut stream, or broken JSON (ValueError): transient.
            raise LLMError(f"the model call failed: {type(exc).__name__}", retryable=True) from None
        except APIStatusError as exc:
            raise LLMError(
                f"the model call failed: {_describe(exc)}",
                retryable=is_retryable(exc),
                status=getattr(exc, "status_code", None),
            ) from None
        response = _parse_response(message, attempt=tries)
        if log.isEnabledFor(logging.DEBUG):  # every call's tokens are in llm_usage already
            log.debug(
                "llm call",
                extra={
                    "purpose": req.purpose,
                    "model": response.model,
                    "stop_reason": response.stop_reason,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                    **response.usage.model_dump(),
                },
            )
        return response

    @staticmethod
    def _log_retry(state: Any) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "llm call failed, retrying",
            extra={
                "attempt": state.attempt_number,
                "error": _describe(exc) if exc else None,
                "wait_s": round(state.next_action.sleep, 2) if state.next_action else None,
            },
        )
