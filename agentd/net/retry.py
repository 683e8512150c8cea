"""Retrying HTTP calls to other services: honour Retry-After, but never beyond our ceiling."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)


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


def http_retrying(
    *,
    attempts: int,
    initial: float,
    ceiling: float,
    sleep: Callable[[float], Awaitable[None]],
    retry_on: tuple[type[BaseException], ...],
    log: logging.Logger,
    message: str,
    redact: Callable[[str], str],
    **log_extra: Any,
) -> AsyncRetrying:
    """Retry `retry_on` errors up to `attempts` times, honouring Retry-After, logging each
    failed attempt (redacted: an error text may quote a key) before the wait."""

    def before_sleep(state: Any) -> None:
        exc = state.outcome.exception() if state.outcome else None
        extra = {**log_extra, "attempt": state.attempt_number, "error": redact(repr(exc))}
        log.warning(message, extra=extra)

    return AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=honour_retry_after(initial, ceiling),
        sleep=sleep,
        retry=retry_if_exception_type(retry_on),
        before_sleep=before_sleep,
        reraise=True,
    )
