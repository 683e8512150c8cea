"""From configuration to the LLM agentd calls: one adapter per provider, one breaker per model,
one chain per purpose."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from agentd.llm.fallback import Breaker, Candidate, FallbackLLM, ProviderLLM
from agentd.llm.settings import ANTHROPIC, PURPOSES, ModelSettings, ProviderConfig, named_secret
from agentd.llm.types import LLMError


def _anthropic_key(config: Any) -> str | None:
    secret = getattr(getattr(config, "secrets", None), "anthropic_api_key", None)
    return secret.get_secret_value() if secret is not None else None


def _adapter(
    name: str, provider: ProviderConfig, config: Any, env: Mapping[str, str] | None
) -> ProviderLLM:
    llm_config = config.llm
    if name == ANTHROPIC and not provider.base_url:
        provider = provider.model_copy(update={"base_url": llm_config.base_url})
    if provider.kind == "openai":
        from agentd.llm.openai_adapter import OpenAILLM

        return OpenAILLM(llm_config, named_secret(provider.api_key_env, env), provider, name)
    from agentd.llm.anthropic_adapter import AnthropicLLM

    if provider.api_key_env:
        key: str | None = named_secret(provider.api_key_env, env)
    elif provider.kind == "anthropic":
        key = _anthropic_key(config)
        if key is None:
            raise LLMError(
                f"ANTHROPIC_API_KEY is not set and the models of {name!r} need it; export it "
                "or use a systemd credential",
                retryable=False,
                reason="auth",
            )
    else:
        key = None  # Bedrock and Vertex: the cloud's own credentials
    return AnthropicLLM(llm_config, key, provider=provider, name=name)


def build(
    config: Any,
    settings: ModelSettings | None = None,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FallbackLLM:
    settings = settings or ModelSettings.of(config.llm)
    llm_config = config.llm
    background = llm_config.background_model or llm_config.model
    adapters: dict[str, ProviderLLM] = {}
    breakers: dict[str, Breaker] = {}
    chains: dict[str, list[Candidate]] = {}
    for purpose in PURPOSES:
        primary = llm_config.model if purpose == "turn" else background
        chain = []
        for ref in settings.chain(primary, purpose):
            if ref.provider not in adapters:
                provider = settings.provider(ref.provider)
                adapters[ref.provider] = _adapter(ref.provider, provider, config, env)
            breaker = breakers.setdefault(ref.label, Breaker(settings.breaker, clock))
            chain.append(Candidate(ref, adapters[ref.provider], breaker))
        chains[purpose] = chain
    return FallbackLLM(
        chains=chains,
        policy=settings.breaker,
        retries=llm_config.retries,
        adapters=list(adapters.values()),
    )
