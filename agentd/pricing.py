"""Estimated model cost from token counts: an estimate for people, never a bill."""

from __future__ import annotations

# Per million tokens (USD): input, output, cache read, cache write.
PRICES = {
    "claude-haiku-4-5": (1.0, 5.0, 0.10, 1.25),
    "claude-sonnet-4-5": (3.0, 15.0, 0.30, 3.75),
}


def estimated_cost(
    model: str, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int
) -> float:
    """USD for these tokens at the model's list price (Haiku's when the model is unknown)."""
    prices = PRICES.get(model, PRICES["claude-haiku-4-5"])
    tokens = (input_tokens, output_tokens, cache_read, cache_write)
    return sum(n * price for n, price in zip(tokens, prices, strict=True)) / 1e6
