"""What a turn needs from the outside world, shared by the turn workflow and the agent loop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, field_validator

from agentd.agent.routing import RoutingDecision
from agentd.chat.outbox import Outbox
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Clock
from agentd.llm import LLM
from agentd.media.chatdocs import DocDeps
from agentd.media.vision import VisionDeps
from agentd.media.voice import VoiceDeps
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import Embedder
from agentd.tools import ToolRegistry


def _identity(text: str) -> str:
    return text


class StableMemo:
    """The turn's system prompt and tools as built, by the tools they were built from.

    They change only when a tool comes or goes (an MCP server connects later), so rebuilding
    them, with a deep copy of every tool's schema, on each call was waste. A few variants are
    kept (`key`: the enabled skills, the tools a chat is not offered), since chats alternate.
    """

    KEPT = 8

    def __init__(self) -> None:
        self.tools: tuple[Any, ...] | None = None
        self.values: dict[Any, Any] = {}

    def get(self, tools: list[Any], build: Callable[[], Any], key: Any = None) -> Any:
        """`build()`'s value, reused while `tools` are the very same objects and `key` is
        equal."""
        same = self.tools is not None and len(self.tools) == len(tools)
        if not same or not all(a is b for a, b in zip(self.tools or (), tools, strict=True)):
            self.tools, self.values = tuple(tools), {}
        if key not in self.values:
            if len(self.values) >= self.KEPT:
                self.values.clear()
            self.values[key] = build()
        return self.values[key]


class CallDeps(Protocol):
    """What one tool call needs (agent/calls.py): a turn's TurnDeps has it, and so does an
    automation's CallServices."""

    @property
    def config(self) -> Config: ...
    @property
    def db(self) -> Database: ...
    @property
    def outbox(self) -> Outbox: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def registry(self) -> ToolRegistry: ...
    @property
    def redact(self) -> Callable[[str], str]: ...


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
    memory_bits: BitCache | None = None  # the database's in-process sign bits, for recall
    # Starts a workflow idempotently: (name, input, instance_id=, key=) — for summaries.
    start_workflow: Callable[..., Awaitable[Any]] | None = None
    vision: VisionDeps | None = None  # None: photos get a polite "can't look at photos" reply
    voice: VoiceDeps | None = None  # None: voice notes get a reply saying how to enable them
    docs: DocDeps | None = None  # None: documents get a polite "can't read documents" reply
    # (name, description) of the enabled skills, by name, read per model call (the owner
    # enables them from the CLI while the daemon runs); None: skills are off.
    skill_listing: Callable[[], Awaitable[tuple[tuple[str, str], ...]]] | None = None
    # The capability that lists them says the rest, so the loop names none: its tools say
    # where they are offered (tools/base.py `offered`), and `listed_use(tool, args)` names the
    # entry a successful call loaded (the reply says which one it followed).
    listed_use: Callable[[str, Mapping[str, Any]], str | None] | None = None
    stable: StableMemo = field(default_factory=StableMemo, compare=False)


class Recall(BaseModel):
    """What long-term memory contributes to this turn's prompt (R-LTM-2, R-LTM-3)."""

    facts: str = ""
    memories: str = ""
    # The recalled memories derived from outside content, in words (they taint the turn);
    # None: recalled before memories said where they came from (any memory then taints).
    outside: list[str] | None = None
    pending: str = ""  # what the chat's other turns still wait for (agent/pending.py)
    # One of those was written with outside content in view: the turn that lists it is tainted.
    pending_outside: bool = False
    searched: bool = False  # the memories were searched (not only the facts listed)
    why: str = ""  # what was searched for, or why nothing was
    route: RoutingDecision | None = None  # agent/routing.py; None: journaled before it existed
    language: str = ""  # the user's language (chat/locale.py); "": not known

    @field_validator("outside", mode="before")
    @classmethod
    def _flag_from_before(cls, value: Any) -> Any:
        """A recall journaled with a yes/no flag said nothing of which memories: unknown."""
        return None if isinstance(value, bool) else value
