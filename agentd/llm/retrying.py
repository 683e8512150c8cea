"""agentd's one retry policy for model calls, whatever the provider: tenacity, with the
server's Retry-After honoured up to a ceiling (the SDKs' own retries are off)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from agentd.net.retry import honour_retry_after

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
log = logging.getLogger("agentd.llm")


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    base: float,
    ceiling: float,
    retryable: Callable[[BaseException], bool],
    retry_after: Callable[[BaseException], float | None],
    describe: Callable[[BaseException], str],
    sleep: Sleep | None = None,
    model: str = "",
) -> tuple[T, int]:
    """`call()` until it answers or fails for good (raised as is); (answer, attempt number)."""

    def before_sleep(state: Any) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "llm call failed, retrying",
            extra={
                "model": model,
                "attempt": state.attempt_number,
                "error": describe(exc) if exc else None,
                "wait_s": round(state.next_action.sleep, 2) if state.next_action else None,
            },
        )

    kwargs: dict[str, Any] = {
        "stop": stop_after_attempt(max(1, attempts)),
        "wait": honour_retry_after(base, ceiling, retry_after),
        "retry": retry_if_exception(retryable),
        "reraise": True,
        "before_sleep": before_sleep,
    }
    if sleep is not None:
        kwargs["sleep"] = sleep
    async for attempt in AsyncRetrying(**kwargs):
        with attempt:
            result = await call()
        if not attempt.retry_state.outcome or not attempt.retry_state.outcome.failed:
            return result, attempt.retry_state.attempt_number
    raise AssertionError("unreachable: tenacity reraises the last error")
