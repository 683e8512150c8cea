"""The LLM boundary: neutral request and response types, and the adapters behind them.

Claude through the official `anthropic` SDK (anthropic_adapter.py), OpenAI-compatible servers
through the official `openai` SDK (openai_adapter.py, an optional extra), and FallbackLLM
(fallback.py), which routes each request by purpose along its chain of models.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from agentd.llm.types import LLMError, LLMRequest, LLMResponse

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.llm.fallback import FallbackLLM
    from agentd.llm.settings import ModelSettings


class LLM(Protocol):
    model: str

    async def complete(
        self, req: LLMRequest, on_text: Callable[[str], Awaitable[None]] | None = None
    ) -> LLMResponse: ...

    async def close(self) -> None: ...


def create_llm(config: Config, settings: ModelSettings | None = None) -> FallbackLLM:
    """Build every configured model's adapter (SDKs imported in a thread, off the CLI path).

    `settings` defaults to what `[llm]` carries (fallbacks, models, providers, breaker).
    """
    from agentd.llm.factory import build

    return build(config, settings)


def api_key(config: Config) -> str:
    """The model API key; a missing one is a configuration error at start."""
    key = config.secrets.anthropic_api_key
    if key is None:
        raise LLMError(
            "ANTHROPIC_API_KEY is not set; export it or use a systemd credential",
            retryable=False,
            reason="auth",
        )
    return key.get_secret_value()


__all__ = ["LLM", "LLMError", "LLMRequest", "LLMResponse", "api_key", "create_llm"]
