"""What chat commands work with, passed in explicitly by the daemon."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentd.chat.outbox import Outbox
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock


@dataclass(frozen=True)
class CommandDeps:
    config: Config
    db: Database
    outbox: Outbox
    clock: Clock
    # The engine's cancel: stops a running instance now (STOPPING: it had not ended in time).
    cancel: Callable[[str], Awaitable[str]]
    started_at: float  # when the daemon started, for /status
    embedder: Any = None  # memory's embedder, for edits made from /memory (None: not embedded)
    # The engine's prepare_start: a button press starts a workflow in the intake transaction.
    start: Callable[..., bool] | None = None
    llm: Any = None  # the FallbackLLM: /model's choices and /status's breakers
