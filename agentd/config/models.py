"""Which models agentd may call, through which providers, in which order (pydantic, validated).

`LLMConfig` (schema.py) carries these keys under `[llm]` and checks them here:

    [llm]
    model = "claude-haiku-4-5"                 # the primary (the built-in `anthropic` provider)
    fallbacks = ["claude-sonnet-4-5", "local/qwen2.5:7b"]
    [llm.models]                               # a model per purpose; unnamed purposes: `model`
    summary = "local/qwen2.5:7b"
    [llm.providers.local]
    kind = "openai"                            # any OpenAI-compatible server: Ollama, vLLM, …
    base_url = "http://127.0.0.1:11434/v1"
    local = true                               # costs 0, and `agentd usage` says so
    [llm.breaker]
    interval = 60

A model is named `provider/model` when `provider` is a configured provider's name, else it is a
model id of the built-in `anthropic` provider (Claude ids never contain a slash; Ollama's tags
contain colons, so the slash is the separator).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentd.ledger.pricing import ModelPrice

ANTHROPIC = "anthropic"  # the built-in provider: [llm] base_url and ANTHROPIC_API_KEY
# What a request's `purpose` may be; each may name its own model in [llm.models].
PURPOSES = (
    "turn",
    "summary",
    "facts",
    "vision",
    "extract",
    "briefing",
    "automation",
    "skill",
    "watch",
    "task",
)
# A purpose `[llm.models]` does not name runs on another purpose's chain rather than on
# `background_model`: a background task is work the owner asked the chat for, so it stays on
# the chat's models unless its own is named.
FOLLOWS = {"task": "turn"}
# The failures that count against a model's circuit breaker: the model is down or out of budget.
OUTAGE_REASONS = ("overloaded", "server_error", "timeout", "unreachable", "rate_limit", "billing")
# Why a call moves on to the next model (each is an LLMError.reason): an outage, broken answers
# that kept coming, or a request the model cannot take (tools, images), which is no outage.
FALLBACK_REASONS = (*OUTAGE_REASONS, "malformed", "unsupported")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProviderConfig(_Strict):
    """`[llm.providers.<name>]`: where a family of models is reached, and what it can do."""

    # anthropic: the Messages API (a gateway or proxy by base_url); bedrock / vertex: Claude on
    # AWS or Google Cloud through the SDK's own clients (extras agentd[bedrock] / [vertex]);
    # openai: any server speaking Chat Completions (the extra agentd[openai]).
    kind: Literal["anthropic", "bedrock", "vertex", "openai"] = "openai"
    base_url: str = ""
    # The NAME of the variable (or systemd credential) holding the key, never the key itself.
    # Empty: none is sent (a local server), or the SDK's own default for its kind.
    api_key_env: str = ""
    region: str = ""  # bedrock, vertex
    project_id: str = ""  # vertex
    timeout: float | None = Field(default=None, gt=0)  # None: [llm] timeout
    # What the models of this provider can do. None: assumed (tools, images) and detected from
    # the server's answer when it refuses; false: said before the call, never dropped silently.
    tools: bool | None = None
    images: bool | None = None
    streaming: bool = True  # false: answers are fetched whole, and the text shown at the end
    local: bool = False  # runs on the owner's hardware: priced at 0 unless prices say otherwise
    prices: dict[str, ModelPrice] = Field(default_factory=dict)  # USD per million, per model


class BreakerPolicy(_Strict):
    """`[llm.breaker]`: how a failing model is skipped, so an outage costs one call per interval."""

    failures: int = Field(default=2, ge=1, le=100)  # consecutive failed calls that open it
    interval: float = Field(default=60.0, gt=0)  # seconds open before one probe call
    max_interval: float = Field(default=900.0, gt=0)  # each failed probe doubles, up to this
    # Retries of a model that has a fallback after it, before moving on (the last model of a
    # chain keeps [llm] retries): a fallback is better than a minute of backoff.
    retries_before_fallback: int = Field(default=1, ge=0, le=20)


class ModelRef(_Strict):
    """One model of one provider."""

    provider: str = ANTHROPIC
    model: str

    @property
    def label(self) -> str:
        return self.model if self.provider == ANTHROPIC else f"{self.provider}/{self.model}"


def parse_ref(name: str, providers: Mapping[str, ProviderConfig]) -> ModelRef:
    """`provider/model` when provider is configured, else an `anthropic` model id."""
    head, sep, rest = name.partition("/")
    if sep and rest and (head in providers or head == ANTHROPIC):
        return ModelRef(provider=head, model=rest)
    return ModelRef(model=name)


def check_names(
    models: Mapping[str, str],
    providers: Mapping[str, ProviderConfig],
    named: Iterable[tuple[str, str]] = (),
) -> None:
    """Purposes and provider names that exist; a ValueError names the key that is wrong."""
    unknown = sorted(set(models) - set(PURPOSES))
    if unknown:
        known = ", ".join(PURPOSES)
        raise ValueError(f"llm.models: unknown purpose {unknown[0]!r}; the purposes: {known}")
    if ANTHROPIC in providers and providers[ANTHROPIC].kind != "anthropic":
        raise ValueError("llm.providers.anthropic is the built-in Messages API provider")
    for key, name in [*named, *((f"models.{p}", n) for p, n in models.items())]:
        head, sep, _ = name.partition("/")
        # Claude ids have no slash: `x/…` with no provider x is a typo, not a model id.
        if sep and head not in providers and head != ANTHROPIC:
            raise ValueError(
                f"llm.{key}: {name!r} names no provider {head!r}; add "
                f"[llm.providers.{head}] or correct the name"
            )


class ModelSettings(_Strict):
    """What `[llm]` adds for model choice; the primary model stays `[llm] model`."""

    fallbacks: list[str] = Field(default_factory=list)
    models: dict[str, str] = Field(default_factory=dict)  # purpose → model
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    breaker: BreakerPolicy = Field(default_factory=BreakerPolicy)

    @model_validator(mode="after")
    def _known_names(self) -> ModelSettings:
        check_names(self.models, self.providers, [("fallbacks", n) for n in self.fallbacks])
        return self

    def ref(self, name: str) -> ModelRef:
        return parse_ref(name, self.providers)

    def chain(self, primary: str, purpose: str = "turn") -> list[ModelRef]:
        """The models tried for a purpose, in order, each once: its own, then the fallbacks."""
        first = self.models.get(purpose) or primary
        out: list[ModelRef] = []
        for name in [first, *self.fallbacks]:
            ref = self.ref(name)
            if ref not in out:
                out.append(ref)
        return out

    def provider(self, name: str) -> ProviderConfig:
        if name in self.providers:
            return self.providers[name]
        if name == ANTHROPIC:
            return ProviderConfig(kind="anthropic")
        raise ValueError(f"llm: no provider named {name!r}; add [llm.providers.{name}]")

    @classmethod
    def of(cls, llm_config: object) -> ModelSettings:
        """The settings found on an `[llm]` section (keys the section lacks keep defaults)."""
        values = {k: getattr(llm_config, k) for k in cls.model_fields if hasattr(llm_config, k)}
        return cls.model_validate(values)
