"""Prices of the configured models, in the form `[llm.prices]` overrides take.

`agentd/ledger/pricing.py` matches a model by its longest price-table prefix, so a local
provider is priced at 0 by one entry, `<provider>/`, once usage records a response's label
(`LLMResponse.label`: `local/qwen2.5:7b`, not the bare `qwen2.5:7b`, which would match
nothing and be estimated at Claude's price).
"""

from __future__ import annotations

from agentd.config.models import ANTHROPIC, ModelSettings
from agentd.ledger.pricing import PRICES, ModelPrice, price_for

FREE = ModelPrice(input=0, output=0, cache_read=0, cache_write_5m=0, cache_write_1h=0)
# A remote embedder's rows (retrieval/spend.py) are `http:<model>`: 0 unless [llm.prices]
# names the model so (`[llm.prices."http:text-embedding-3-small"]`), never a Claude estimate.
EMBEDDER = "http:"
# Transcription's rows are `stt:<model>` (media/transcribe.py): OpenAI's models at their list
# price per minute, any other 0 unless [llm.prices] names it (`audio_minute = 0.0007`).
STT = "stt:"


def provider_prices(settings: ModelSettings) -> dict[str, ModelPrice]:
    """Overrides for every configured provider: its own prices, and 0 for a local one."""
    table: dict[str, ModelPrice] = {}
    for name, provider in settings.providers.items():
        prefix = "" if name == ANTHROPIC else f"{name}/"
        if provider.local:
            table[prefix] = FREE
        table.update({prefix + model: price for model, price in provider.prices.items()})
    table.pop("", None)  # the built-in provider is never "local"
    return table


def price_note(label: str, settings: ModelSettings) -> str:
    """How `agentd usage` and `agentd models` should describe a model's price."""
    if label.startswith(EMBEDDER):
        return f'embedder: 0 unless [llm.prices."{label}"] sets it'
    if label.startswith(STT):
        known = label in PRICES
        return "list price per minute" if known else f'0 unless [llm.prices."{label}"] sets it'
    ref = settings.ref(label)
    if ref.provider == ANTHROPIC:
        known = any(ref.model.startswith(name) for name in PRICES)
        return "list price" if known else "price unknown: estimated as Claude Haiku 4.5"
    provider = settings.provider(ref.provider)
    if ref.model in provider.prices:
        return "configured price"
    if provider.local:
        return "local: costs 0"
    return f"price unknown: set [llm.providers.{ref.provider}.prices]"


def price_table(llm_config: object) -> dict[str, ModelPrice]:
    """Every override `agentd usage`, /status and the dashboard price by: the providers' (a
    local one at 0), then `[llm.prices]`, which wins."""
    own = getattr(llm_config, "prices", {}) or {}
    return {EMBEDDER: FREE, STT: FREE, **provider_prices(ModelSettings.of(llm_config)), **own}


def cheapest(llm_config: object) -> str:
    """The configured model with the lowest list price (input plus output per million tokens,
    a local one at 0): what a purpose asked to be cheap uses when [llm.models] names none."""
    names = [
        getattr(llm_config, "model", ""),
        getattr(llm_config, "background_model", ""),
        *getattr(llm_config, "fallbacks", []),
        *(getattr(llm_config, "models", {}) or {}).values(),
    ]
    table = price_table(llm_config)
    settings = ModelSettings.of(llm_config)
    priced = []
    for order, name in enumerate(n for n in names if n):
        p = price_for(settings.ref(name).label, table)
        priced.append((p.input + p.output, order, name))
    return min(priced)[2] if priced else getattr(llm_config, "model", "")
