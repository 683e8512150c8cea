"""What a turn needs from the outside world, shared by the turn workflow and the agent loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock
from agentd.llm import LLM
from agentd.media.chatdocs import DocDeps
from agentd.media.voice import VoiceDeps
from agentd.memory.embedders import Embedder
from agentd.outbox import Outbox
from agentd.tools import ToolRegistry
from agentd.vision import VisionDeps


def _identity(text: str) -> str:
    return text


@dataclass(frozen=True)
class TurnDeps:
    config: Config
    db: Database
    llm: LLM
    outbox: Outbox
    clock: Clock
    registry: ToolRegistry = field(default_factory=ToolRegistry)
    redact: Callable[[str], str] = _identity  # secrets out of tool results and approvals
    embedder: Embedder | None = None  # None: long-term memory is off
    # Starts a workflow idempotently: (name, input, instance_id=, key=) — for summaries.
    start_workflow: Callable[..., Awaitable[Any]] | None = None
    vision: VisionDeps | None = None  # None: photos get a polite "can't look at photos" reply
    voice: VoiceDeps | None = None  # None: voice notes get a reply saying how to enable them
    docs: DocDeps | None = None  # None: documents get a polite "can't read documents" reply


class Recall(BaseModel):
    """What long-term memory contributes to this turn's prompt (R-LTM-2, R-LTM-3)."""

    facts: str = ""
    memories: str = ""
