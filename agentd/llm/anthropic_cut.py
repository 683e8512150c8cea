"""What a Messages API answer stream that broke partway, or was stopped, cost (llm/cut.py).

Read from the stream's own events: `message_start` carries the input tokens (and the cache's
share); a `message_delta`, when one came before the break, the output so far; else the output
is estimated from the text and tool input received, and the row says it is an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentd.llm.cut import estimated
from agentd.llm.types import CutAttempt, Usage


def usage_from_api(usage: dict[str, Any]) -> Usage:
    """The API's usage object (a message's, or a stream event's) as agentd counts tokens."""
    split = usage.get("cache_creation") or {}  # absent from older API versions and proxies
    return Usage(
        input_tokens=usage.get("input_tokens") or 0,
        output_tokens=usage.get("output_tokens") or 0,
        cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
        cache_write_tokens=usage.get("cache_creation_input_tokens") or 0,
        cache_write_1h_tokens=split.get("ephemeral_1h_input_tokens") or 0,
    )


def _as_dict(value: Any) -> dict[str, Any]:
    to_dict = getattr(value, "to_dict", None)
    found = to_dict(mode="json") if callable(to_dict) else value
    return found if isinstance(found, dict) else {}


@dataclass
class StreamTally:
    """The usage an answer stream has reported so far, and how much it has written."""

    answered: bool = False  # a 2xx answer came: the server took the request
    started: dict[str, Any] | None = None  # message_start's usage
    delta: dict[str, Any] | None = None  # the last message_delta's (cumulative)
    chars: int = 0  # text and tool input received

    def see(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            self.started = _as_dict(getattr(getattr(event, "message", None), "usage", None))
        elif kind == "message_delta":
            self.delta = _as_dict(getattr(event, "usage", None))
        elif kind == "content_block_delta":
            delta = getattr(event, "delta", None)
            written = getattr(delta, "text", None) or getattr(delta, "partial_json", None)
            self.chars += len(written) if isinstance(written, str) else 0

    def cut(self, model: str, attempt: int) -> CutAttempt | None:
        """The broken attempt's cost; None when the answer never started (nothing billed)."""
        if self.started is None:
            return None
        reported = {**self.started, **{k: v for k, v in (self.delta or {}).items() if v}}
        usage = usage_from_api(reported)
        if self.delta and self.delta.get("output_tokens"):
            return CutAttempt(model=model, attempt=attempt, usage=usage)
        return estimated(model, attempt, usage, self.chars)
