"""Model prices, for estimates in `agentd usage` (R-AUD-2): an estimate, never a bill."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

# USD per million tokens, from the Claude API pricing table (platform.claude.com, "prompt
# caching" pricing), as of this date. Override or add models in config: [llm.prices.<model>].
PRICES_AS_OF = "2026-11-23"


class ModelPrice(BaseModel):
    # Read from [llm.prices.<model>]: a misspelt key ("audio_minutes") is an error, as in
    # every other section, not a price silently left at 0.
    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(ge=0)  # cache hits and refreshes: 0.1× input
    cache_write_5m: float = Field(ge=0)  # 1.25× input
    cache_write_1h: float = Field(ge=0)  # 2× input
    audio_minute: float = Field(default=0.0, ge=0)  # USD per minute: a transcription model


PRICES: dict[str, ModelPrice] = {
    "claude-haiku-4-5": ModelPrice(
        input=1.0, output=5.0, cache_read=0.10, cache_write_5m=1.25, cache_write_1h=2.0
    ),
    "claude-sonnet-4-5": ModelPrice(
        input=3.0, output=15.0, cache_read=0.30, cache_write_5m=3.75, cache_write_1h=6.0
    ),
    "claude-3-5-haiku": ModelPrice(
        input=0.80, output=4.0, cache_read=0.08, cache_write_5m=1.0, cache_write_1h=1.6
    ),
}
FALLBACK = "claude-haiku-4-5"

# Speech to text, priced per minute of audio, labelled `stt:<model>` on OpenAI's endpoint
# (media/transcribe.py labels others by their host); same source and date, openai.com/api/pricing.
_PER_MINUTE = dict(input=0, output=0, cache_read=0, cache_write_5m=0, cache_write_1h=0)
PRICES |= {
    "stt:whisper-1": ModelPrice(**_PER_MINUTE, audio_minute=0.006),
    "stt:gpt-4o-transcribe": ModelPrice(**_PER_MINUTE, audio_minute=0.006),
    "stt:gpt-4o-mini-transcribe": ModelPrice(**_PER_MINUTE, audio_minute=0.003),
}

# The shortest prefix each model caches, in tokens (Claude API docs, "prompt caching", same
# date): a shorter prefix is neither written nor read. Matched by prefix like the prices.
CACHE_MINIMUMS: dict[str, int] = {
    "claude-haiku-4-5": 4096,
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
    "claude-sonnet-4-6": 2048,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
    "claude-sonnet-4-5": 1024,
    "claude-sonnet-4": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
    "claude-3-7-sonnet": 1024,
}


def cache_minimum(model: str) -> int:
    """The model's minimum cacheable prefix; unknown models get the largest, which is safe."""
    matches = [name for name in CACHE_MINIMUMS if model.startswith(name)]
    return CACHE_MINIMUMS[max(matches, key=len)] if matches else max(CACHE_MINIMUMS.values())


class Tokens(BaseModel):
    """Token counts of one or many calls, by how the API bills them."""

    input_tokens: int = 0  # uncached
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0  # all TTLs
    cache_write_1h_tokens: int = 0  # the 1-hour part of cache_write_tokens
    audio_seconds: float = 0.0  # audio transcribed, which is priced per minute, not per token

    @property
    def total(self) -> int:
        """Every token billed, input of all three kinds and output: what [limits] counts."""
        read, written = self.cache_read_tokens, self.cache_write_tokens
        return self.input_tokens + read + written + self.output_tokens


def price_for(model: str, overrides: Mapping[str, ModelPrice] | None = None) -> ModelPrice:
    """The price of a model id (dated ids match their alias by prefix); Haiku 4.5 if unknown."""
    table = {**PRICES, **(overrides or {})}
    matches = [name for name in table if model.startswith(name)]
    return table[max(matches, key=len)] if matches else table.get(FALLBACK, PRICES[FALLBACK])


def cost(t: Tokens, p: ModelPrice) -> float:
    """USD as billed: uncached input, cache reads and writes (by TTL) and output apart."""
    write_5m = t.cache_write_tokens - t.cache_write_1h_tokens
    return (
        t.input_tokens * p.input
        + t.output_tokens * p.output
        + t.cache_read_tokens * p.cache_read
        + write_5m * p.cache_write_5m
        + t.cache_write_1h_tokens * p.cache_write_1h
    ) / 1e6 + t.audio_seconds / 60 * p.audio_minute


def uncached_cost(t: Tokens, p: ModelPrice) -> float:
    """What the same calls would cost with no prompt caching: every input token at full price."""
    total_input = t.input_tokens + t.cache_read_tokens + t.cache_write_tokens
    audio = t.audio_seconds / 60 * p.audio_minute
    return (total_input * p.input + t.output_tokens * p.output) / 1e6 + audio
