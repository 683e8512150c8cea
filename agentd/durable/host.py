"""What a Step needs from the engine that runs it, as a protocol (step.py never imports engine)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from agentd.durable.clock import Clock

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    max_step_result_bytes: int = 1024 * 1024
    max_steps_per_instance: int = 1024
    max_input_bytes: int = 1024 * 1024


class StepHost(Protocol):
    """The engine as its steps see it: time, limits, the journal's two write paths, suspension."""

    clock: Clock
    limits: Limits
    stopping: bool
    redact: Callable[[str], str]

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One transaction, on disk (fsync'd) before it returns."""
        ...

    async def write_unsynced(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One transaction that survives a process crash; the next synced commit makes it
        survive a power loss too."""
        ...

    def key_of(self, instance_id: str) -> str | None: ...

    def waiter(self, instance_id: str) -> asyncio.Event: ...

    def suspended(
        self,
        instance_id: str,
        status: str,
        *,
        wake_at: float | None = None,
        waiting_for: str | None = None,
        release_key: bool = False,
    ) -> AbstractAsyncContextManager[None]: ...
