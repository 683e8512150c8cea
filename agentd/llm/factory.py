"""From configuration to the LLM agentd calls: one adapter per provider, one breaker per model,
one chain per purpose."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Mapping
from typing import Any

from agentd.config.models import ANTHROPIC, FOLLOWS, PURPOSES, ModelSettings, ProviderConfig
from agentd.config.secrets import read_secret
from agentd.llm.fallback import Breaker, Candidate, FallbackLLM, ProviderLLM
from agentd.llm.pricing import cheapest
from agentd.llm.types import LLMError

# What a Messages API endpoint of the owner's naming, with no key setting, is sent as its key.
NO_KEY = "no-key-configured"


def _anthropic_key(config: Any) -> str | None:
    secret = getattr(getattr(config, "secrets", None), "anthropic_api_key", None)
    return secret.get_secret_value() if secret is not None else None


def _adapter(
    name: str, provider: ProviderConfig, config: Any, secrets: Mapping[str, str]
) -> ProviderLLM:
    llm_config = config.llm
    if name == ANTHROPIC and not provider.base_url:
        provider = provider.model_copy(update={"base_url": llm_config.base_url})
    if provider.kind == "openai":
        # Said at start (the import itself runs later, in a thread), not at the first call.
        if importlib.util.find_spec("openai") is None:
            raise LLMError(
                f"the provider {name!r} needs the Python package 'openai', which is not "
                "installed; install it with: pip install 'agentd[openai]'",
                retryable=False,
                reason="unsupported",
            )
        from agentd.llm.openai_adapter import OpenAILLM

        return OpenAILLM(llm_config, read_secret(provider.api_key_env, secrets), provider, name)
    if provider.api_key_env:
        key: str | None = read_secret(provider.api_key_env, secrets)
    elif provider.kind == "anthropic" and name != ANTHROPIC and provider.base_url:
        # Another server that speaks the Messages API, named with no key of its own: it gets
        # none of the owner's. A placeholder, not None: given None the SDK looks for a key
        # itself (ANTHROPIC_API_KEY, a credentials profile) and would send the real one.
        key = NO_KEY
    elif provider.kind == "anthropic":
        # Checked before the SDK loads, so a missing key stops the start at once; only a chain
        # that uses Claude asks for it (a daemon on local models needs no Anthropic key).
        key = _anthropic_key(config)
        if key is None:
            raise LLMError(
                "ANTHROPIC_API_KEY is not set; export it or use a systemd credential (a "
                f"configured model of the provider {name!r} needs it)",
                retryable=False,
                reason="auth",
            )
    else:
        key = None  # Bedrock and Vertex: the cloud's own credentials
    from agentd.llm.anthropic_adapter import AnthropicLLM

    return AnthropicLLM(llm_config, key, provider=provider, name=name)


# Purposes that run often in the background and only decide small things: unless [llm.models]
# names their model, the cheapest configured one answers them.
CHEAP_PURPOSES = frozenset({"watch"})


def build(
    config: Any,
    settings: ModelSettings | None = None,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FallbackLLM:
    settings = settings or ModelSettings.of(config.llm)
    llm_config = config.llm
    source = getattr(config, "secret_source", None)
    secrets = source(env) if source is not None else (env or {})
    background = llm_config.background_model or llm_config.model
    adapters: dict[str, ProviderLLM] = {}
    breakers: dict[str, Breaker] = {}
    chains: dict[str, list[Candidate]] = {}
    for purpose in PURPOSES:
        if purpose in FOLLOWS and purpose not in settings.models:
            chains[purpose] = chains[FOLLOWS[purpose]]  # built before: PURPOSES are in order
            continue
        primary = llm_config.model if purpose == "turn" else background
        if purpose in CHEAP_PURPOSES:
            primary = cheapest(llm_config)
        chain = []
        for ref in settings.chain(primary, purpose):
            if ref.provider not in adapters:
                provider = settings.provider(ref.provider)
                adapters[ref.provider] = _adapter(ref.provider, provider, config, secrets)
            breaker = breakers.setdefault(ref.label, Breaker(settings.breaker, clock))
            chain.append(Candidate(ref, adapters[ref.provider], breaker))
        chains[purpose] = chain
    return FallbackLLM(
        chains=chains,
        policy=settings.breaker,
        retries=llm_config.retries,
        adapters=list(adapters.values()),
    )
