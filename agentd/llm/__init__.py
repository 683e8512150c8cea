"""The LLM boundary: neutral request and response types, and the adapters behind them.

Claude through the official `anthropic` SDK (anthropic_adapter.py), OpenAI-compatible servers
through the official `openai` SDK (openai_adapter.py, an optional extra), and FallbackLLM
(fallback.py), which routes each request by purpose along its chain of models.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from agentd.llm.types import CutAttempt, LLMError, LLMRequest, LLMResponse

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.config.models import ModelSettings
    from agentd.llm.fallback import FallbackLLM


class LLM(Protocol):
    model: str

    async def complete(
        self,
        req: LLMRequest,
        on_text: Callable[[str], Awaitable[None]] | None = None,
        *,
        cut: list[CutAttempt] | None = None,  # gets the attempts cut short, billed all the same
    ) -> LLMResponse: ...

    async def close(self) -> None: ...


def create_llm(config: Config, settings: ModelSettings | None = None) -> FallbackLLM:
    """Build every configured model's adapter (SDKs imported in a thread, off the CLI path).

    `settings` defaults to what `[llm]` carries (fallbacks, models, providers, breaker).
    """
    from agentd.llm.factory import build

    return build(config, settings)


__all__ = ["LLM", "LLMError", "LLMRequest", "LLMResponse", "create_llm"]
