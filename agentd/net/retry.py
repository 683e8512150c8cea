"""Retrying HTTP calls to other services: honour Retry-After, but never beyond our ceiling."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tenacity import wait_exponential_jitter


class RetryableHttpError(Exception):
    """An answer worth retrying (429, 5xx), with the server's Retry-After when it sent one."""

    def __init__(self, message: str, status: int, retry_after: float | None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Retry-After in seconds; None when absent or an HTTP date (backoff is good enough)."""
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def _hinted(exc: BaseException) -> float | None:
    return exc.retry_after if isinstance(exc, RetryableHttpError) else None


def honour_retry_after(
    initial: float,
    ceiling: float,
    hint: Callable[[BaseException], float | None] = _hinted,
) -> Callable[[Any], float]:
    """A tenacity wait: the server's Retry-After capped at `ceiling`, else jittered backoff."""
    backoff = wait_exponential_jitter(multiplier=initial, max=ceiling, jitter=initial)

    def wait(state: Any) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = hint(exc) if exc is not None else None
        if hinted is not None:
            return min(max(hinted, 0.0), ceiling)
        return float(backoff(state))

    return wait
