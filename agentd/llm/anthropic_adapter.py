"""Claude through the official `anthropic` SDK (R-LLM-1, R-LLM-2): requests out, neutral types back.

`AsyncAnthropic` (or its Bedrock / Vertex clients), its public `messages.create` and
`messages.stream`, its own retries off (`max_retries=0`) and agentd's one policy around it
(retrying.py). The SDK is imported in a thread from the moment the adapter is built
(preload.py), while the daemon waits on Telegram and the database.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from agentd.config.models import ANTHROPIC, ProviderConfig
from agentd.llm.anthropic_cut import StreamTally, usage_from_api
from agentd.llm.anthropic_errors import StreamIncomplete, describe, is_retryable, retry_after
from agentd.llm.anthropic_errors import to_llm_error as _to_llm_error
from agentd.llm.cut import answer_lost, stream_taken, taken_unseen
from agentd.llm.preload import preload
from agentd.llm.retrying import Sleep, call_with_retries
from agentd.llm.types import (
    ContentBlock,
    CutAttempt,
    ImageBlock,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    OpaqueBlock,
    TextBlock,
    ToolUseBlock,
)

log = logging.getLogger("agentd.llm")
OnText = Callable[[str], Awaitable[None]]


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
        params["tools"] = [*(t.model_dump() for t in req.tools), *req.server_tools]
    if req.tool_choice:
        params["tool_choice"] = {"type": "tool", "name": req.tool_choice}
    return params


def _without_nulls(value: Any) -> Any:
    """The API's nulls left out, as they must be when a block is sent back."""
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
    return LLMResponse(
        attempt=attempt,
        model=msg["model"],
        content=[b for b in map(_parse_block, msg.get("content") or []) if b is not None],
        stop_reason=msg.get("stop_reason"),
        usage=usage_from_api(msg.get("usage") or {}),
    )


_EXTRA_NEEDS = {"bedrock": ("botocore", "bedrock"), "vertex": ("google.auth", "vertex")}


def _check_extra(kind: str, provider: ProviderConfig) -> None:
    """Bedrock and Vertex sign requests with their cloud's library, an optional extra."""
    if kind not in _EXTRA_NEEDS or (kind == "vertex" and provider.api_key_env):
        return  # a Vertex access token needs no Google library
    module, extra = _EXTRA_NEEDS[kind]
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise LLMError(
            f"Claude on {kind} needs the {module} package, which is not installed; "
            f"install it with: pip install 'agentd[{extra}]'",
            retryable=False,
            reason="unsupported",
        )


def make_client(sdk: ModuleType, provider: ProviderConfig, key: str | None, timeout: float) -> Any:
    """The SDK client for the provider's kind; no SDK retries (agentd's policy is around it)."""
    common: dict[str, Any] = {"max_retries": 0, "timeout": provider.timeout or timeout}
    if provider.base_url:
        common["base_url"] = provider.base_url
    if provider.kind == "bedrock":
        return sdk.AsyncAnthropicBedrock(aws_region=provider.region or None, **common)
    if provider.kind == "vertex":
        return sdk.AsyncAnthropicVertex(
            region=provider.region, project_id=provider.project_id, access_token=key, **common
        )
    return sdk.AsyncAnthropic(api_key=key, **common)


class AnthropicLLM:
    """Claude through the SDK, with SDK retries off and agentd's capped tenacity policy."""

    def __init__(
        self,
        config: Any,  # the [llm] section: model, background_model, timeout, retries, …
        api_key: str | None,
        *,
        sleep: Sleep | None = None,
        provider: ProviderConfig | None = None,
        name: str = ANTHROPIC,
    ) -> None:
        self.model = config.model
        self.background_model = config.background_model or config.model
        self.name = name
        self._config = config
        self._sleep = sleep
        self._provider = provider or ProviderConfig(kind="anthropic", base_url=config.base_url)
        _check_extra(self._provider.kind, self._provider)
        self._key = api_key
        self._sdk = preload("anthropic")
        self._client: Any = None

    async def _get_client(self) -> Any:
        if self._client is None:
            sdk = await self._sdk.module()
            self._client = make_client(sdk, self._provider, self._key, self._config.timeout)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        client = await self._get_client()
        message = await client.messages.create(**params)
        if not hasattr(message, "to_dict"):  # a proxy's page parsed as something else
            raise ValueError("the answer was not a message")
        return message.to_dict(mode="json")

    async def _stream(
        self, params: dict[str, Any], on_text: OnText, tally: StreamTally
    ) -> dict[str, Any]:
        """Stream the answer, reporting the text so far; return the final message.

        The SDK hands back whatever arrived; a stream that ends before message_stop, or inside
        a content block, is a cut answer here and is retried like a dropped connection. `tally`
        keeps what the stream reported and wrote, for the ledger if it breaks.
        """
        client = await self._get_client()
        stopped, open_blocks = False, 0
        async with client.messages.stream(**params) as stream:  # closed however it ends
            tally.answered = True  # the SDK enters once a 2xx answer came
            events = aiter(stream)
            while True:
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    break
                except (KeyError, TypeError, IndexError, AttributeError, RuntimeError) as exc:
                    # Events out of order or malformed (a proxy, a broken server): the SDK's
                    # fold fails on them; transient as far as we can tell, so retried.
                    raise StreamIncomplete(
                        f"malformed stream event ({type(exc).__name__})"
                    ) from None
                tally.see(event)
                kind = event.type
                if kind == "text":
                    await on_text(event.snapshot)
                elif kind == "content_block_start":
                    open_blocks += 1
                elif kind == "content_block_stop":
                    open_blocks -= 1
                elif kind == "message_stop":
                    stopped = True
            message = stream.current_message_snapshot if stopped else None
        if message is None or open_blocks:
            where = "inside a content block" if open_blocks else "without message_stop"
            raise StreamIncomplete(f"the answer stream ended {where}")
        return message.to_dict(mode="json")

    async def complete(
        self,
        req: LLMRequest,
        on_text: OnText | None = None,
        *,
        model: str | None = None,
        attempts: int | None = None,
        cut: list[CutAttempt] | None = None,
    ) -> LLMResponse:
        """One model answer, retried on transient errors; LLMError when it cannot be had.

        With on_text (and a provider that streams), the answer is streamed and on_text gets the
        text written so far. `model` overrides the configured one, `attempts` the retry count.
        Each attempt whose stream ended partway (broken, or stopped by a cancel), and one the
        API took and never answered (a cancel stopped it, it timed out waiting for the answer,
        or the server closed the connection without one), is appended to `cut` as it ends:
        billed, so the caller records it whatever became of the call.
        """
        if model is None:
            model = self.model if req.purpose == "turn" else self.background_model
        params = build_params(req, model, self._config.max_tokens, self._config.cache_ttl)
        stream = on_text is not None and self._provider.streaming
        started = time.perf_counter()
        cut = cut if cut is not None else []
        made, label = 0, self._label(model)

        async def call() -> dict[str, Any]:
            nonlocal made
            made += 1
            if not stream:
                return await self._create_billed(params, label, made, cut)
            assert on_text is not None
            return await self._stream_billed(params, on_text, label, made, cut)

        try:
            message, tries = await call_with_retries(
                call,
                attempts=attempts if attempts is not None else self._config.retries + 1,
                base=self._config.retry_base_delay,
                ceiling=self._config.retry_max_wait,
                retryable=is_retryable,
                retry_after=retry_after,
                describe=describe,
                sleep=self._sleep,
                model=model,
            )
        except LLMError:
            raise
        except Exception as exc:
            raise _to_llm_error(exc, self._label(model)) from None
        response = _parse_response(message, attempt=tries).model_copy(
            update={"provider": self.name}
        )
        if stream is False and on_text is not None and response.text:
            await on_text(response.text)  # a provider that does not stream: shown at the end
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

    async def _create_billed(
        self, params: dict[str, Any], label: str, made: int, cut: list[CutAttempt]
    ) -> dict[str, Any]:
        """One attempt not streamed; one the API took and never answered goes to `cut`."""
        await self._get_client()  # a stop before the request leaves costs nothing
        try:
            return await self._create(params)
        except asyncio.CancelledError:  # stopped while the API worked on it: billed
            cut.append(taken_unseen(label, made, params))
            raise
        except Exception as exc:
            if answer_lost(exc):  # the API took the request: billed
                cut.append(taken_unseen(label, made, params))
            raise

    async def _stream_billed(
        self,
        params: dict[str, Any],
        on_text: OnText,
        label: str,
        made: int,
        cut: list[CutAttempt],
    ) -> dict[str, Any]:
        """One streamed attempt; one that ended partway goes to `cut`, and so does one the
        API took that ended before its first event (stopped, timed out, cut)."""
        await self._get_client()  # a stop before the request leaves costs nothing
        tally = StreamTally()
        try:
            return await self._stream(params, on_text, tally)
        except (Exception, asyncio.CancelledError) as exc:
            if (broken := tally.cut(label, made)) is not None:
                cut.append(broken)
            elif stream_taken(exc, tally.answered):
                cut.append(taken_unseen(label, made, params))
            raise

    def _label(self, model: str) -> str:
        return model if self.name == ANTHROPIC else f"{self.name}/{model}"
