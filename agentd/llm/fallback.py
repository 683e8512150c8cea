"""An LLM over several: the purpose's model first, then the fallbacks, past open breakers.

A model is left for the next one when it is overloaded (529), keeps failing (5xx, timeouts,
broken answers), hits a rate or spend limit (429, billing), or cannot be reached; any other
error (a bad request, a refused key) is the caller's to see, from the model that gave it.

The circuit breaker is per model and per process, in memory: it only decides which model to
try *first* in the next seconds, so losing it on a restart costs one failed call per model,
once, and nothing is wrong after. Keeping it in the database would add a write per failure for
no gain: the journal already records which model answered each step (LLMResponse.provider,
.model, .fallback_reason), which is what a resumed turn needs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentd.config.models import FALLBACK_REASONS, OUTAGE_REASONS, BreakerPolicy, ModelRef
from agentd.llm.types import CutAttempt, LLMError, LLMRequest, LLMResponse

log = logging.getLogger("agentd.llm")
OnText = Callable[[str], Awaitable[None]]


class ProviderLLM(Protocol):
    """One provider's adapter: any of its models, with a retry count chosen per call."""

    async def complete(
        self,
        req: LLMRequest,
        on_text: OnText | None = None,
        *,
        model: str | None = None,
        attempts: int | None = None,
        cut: list[CutAttempt] | None = None,
    ) -> LLMResponse: ...

    async def close(self) -> None: ...


@dataclass
class Breaker:
    """closed → (failures in a row) → open for `interval` → half-open: one probe call →
    closed on success, open again (for twice as long, up to max_interval) on failure."""

    policy: BreakerPolicy
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None
    interval: float = 0.0
    probing: bool = False
    last_reason: str | None = None

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self.clock() - self.opened_at < self.interval:
            return "open"
        return "half-open"

    def allow(self) -> bool:
        """Whether a call may go to this model now (a half-open breaker lets one through)."""
        state = self.state
        if state == "closed":
            return True
        if state == "half-open" and not self.probing:
            self.probing = True
            return True
        return False

    def succeeded(self) -> None:
        self.failures, self.opened_at, self.probing, self.interval = 0, None, False, 0.0

    def failed(self, reason: str) -> None:
        self.last_reason = reason
        if self.probing or self.state == "half-open":  # the probe failed: wait longer
            self.interval = min(self.interval * 2, self.policy.max_interval)
            self.opened_at, self.probing = self.clock(), False
            return
        self.failures += 1
        if self.failures >= self.policy.failures:
            self.opened_at, self.interval = self.clock(), self.policy.interval

    def release(self) -> None:
        """A probe that ended without a verdict (cancelled, a bad request): let another try."""
        self.probing = False


@dataclass
class Candidate:
    ref: ModelRef
    llm: ProviderLLM
    breaker: Breaker


@dataclass
class FallbackLLM:
    """The LLM the rest of agentd calls: routes each request by purpose along its chain."""

    chains: dict[str, list[Candidate]]  # purpose → models in order; "turn" is the default
    policy: BreakerPolicy
    retries: int  # [llm] retries: for the last model of a chain
    adapters: Sequence[ProviderLLM] = ()
    model: str = field(init=False)

    def __post_init__(self) -> None:
        self.model = self.chains["turn"][0].ref.label

    def chain(self, req: LLMRequest) -> list[Candidate]:
        """The request's chain, with a pinned model (`req.model`) moved to the front."""
        chain = list(self.chains.get(req.purpose) or self.chains["turn"])
        if req.model:
            pinned = [c for c in self.candidates() if c.ref.label == req.model]
            if not pinned:
                raise LLMError(
                    f"the model {req.model} is not configured any more; add it to [llm] "
                    "fallbacks or [llm.models] to go on with it",
                    retryable=False,
                    reason="bad_request",
                )
            chain = [pinned[0], *(c for c in chain if c is not pinned[0])]
        return chain

    def candidates(self) -> list[Candidate]:
        seen: dict[str, Candidate] = {}
        for chain in self.chains.values():
            for c in chain:
                seen.setdefault(c.ref.label, c)
        return list(seen.values())

    async def complete(
        self,
        req: LLMRequest,
        on_text: OnText | None = None,
        *,
        cut: list[CutAttempt] | None = None,
    ) -> LLMResponse:
        """The first answer along the chain; the last model's error if every one failed.

        `cut` gets every attempt along the chain whose answer stream ended partway (billed).
        """
        chain = self.chain(req)
        why: str | None = None
        last_error: LLMError | None = None
        for i, cand in enumerate(chain):
            is_last = i == len(chain) - 1
            # An open breaker skips its model; the last one is tried all the same when nothing
            # else answered, so a chain never fails without a call.
            if not cand.breaker.allow() and not (is_last and last_error is None):
                why = why or f"breaker_open:{cand.breaker.last_reason or 'failing'}"
                continue
            try:
                response = await self._try(cand, req, on_text, is_last, cut)
            except LLMError as exc:
                if exc.reason not in FALLBACK_REASONS:
                    raise
                last_error, why = exc, why or exc.reason
                log.warning(
                    "llm model failed, trying the next",
                    extra={"model": cand.ref.label, "reason": exc.reason, "last": is_last},
                )
                continue
            if why is not None:
                response = response.model_copy(update={"fallback_reason": why})
            return response
        if last_error is not None:
            raise last_error
        raise LLMError(
            "every configured model is failing (their breakers are open); try again in a minute",
            retryable=True,
            reason=why or "unreachable",
        )

    async def _try(
        self,
        cand: Candidate,
        req: LLMRequest,
        on_text: OnText | None,
        is_last: bool,
        cut: list[CutAttempt] | None,
    ) -> LLMResponse:
        attempts = self.retries + 1 if is_last else self.policy.retries_before_fallback + 1
        try:
            response = await cand.llm.complete(
                req, on_text, model=cand.ref.model, attempts=attempts, cut=cut
            )
        except LLMError as exc:
            if exc.reason in OUTAGE_REASONS or exc.reason == "malformed":
                cand.breaker.failed(exc.reason)
            else:
                cand.breaker.release()
            raise
        except (asyncio.CancelledError, Exception):
            cand.breaker.release()
            raise
        cand.breaker.succeeded()
        return response

    def status(self) -> list[dict[str, Any]]:
        """Each model's breaker, for /status and `agentd models`."""
        return [
            {
                "model": c.ref.label,
                "state": c.breaker.state,
                "failures": c.breaker.failures,
                "last_reason": c.breaker.last_reason,
            }
            for c in self.candidates()
        ]

    async def close(self) -> None:
        for adapter in self.adapters:
            await adapter.close()
