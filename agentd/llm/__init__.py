"""The LLM boundary: neutral request and response types, and the Anthropic Messages API adapter
(anthropic_adapter.py over messages_http.py: HTTP with aiohttp, no SDK).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from agentd.llm.types import LLMError, LLMRequest, LLMResponse

if TYPE_CHECKING:
    from agentd.config import Config


class LLM(Protocol):
    model: str

    async def complete(
        self, req: LLMRequest, on_text: Callable[[str], Awaitable[None]] | None = None
    ) -> LLMResponse: ...

    async def close(self) -> None: ...


def create_llm(config: Config) -> LLM:
    """Build the configured model adapter (imported only now, off the CLI path)."""
    key = api_key(config)
    from agentd.llm.anthropic_adapter import AnthropicLLM

    return AnthropicLLM(config.llm, key)


def api_key(config: Config) -> str:
    """The model API key; a missing one is a configuration error at start."""
    key = config.secrets.anthropic_api_key
    if key is None:
        raise LLMError(
            "ANTHROPIC_API_KEY is not set; export it or use a systemd credential",
            retryable=False,
        )
    return key.get_secret_value()


__all__ = ["LLM", "LLMError", "LLMRequest", "LLMResponse", "api_key", "create_llm"]
