"""The LLM boundary. Only `anthropic_adapter` imports the provider SDK (R-LLM-2)."""

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
    """Build the configured model adapter (imports the SDK only now, off the CLI path)."""
    key = api_key(config)
    from agentd.llm import anthropic_loader

    anthropic_loader.load(lazy=config.startup.lazy_anthropic)
    from agentd.llm.anthropic_adapter import AnthropicLLM

    return AnthropicLLM(config.llm, key)


def api_key(config: Config) -> str:
    """The model API key, checked before seconds go into importing the SDK."""
    key = config.secrets.anthropic_api_key
    if key is None:
        raise LLMError(
            "ANTHROPIC_API_KEY is not set; export it or use a systemd credential",
            retryable=False,
        )
    return key.get_secret_value()


__all__ = ["LLM", "LLMError", "LLMRequest", "LLMResponse", "api_key", "create_llm"]
