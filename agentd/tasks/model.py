"""What a task is started with and ends with (journaled as its workflow's input and output)."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, Field

from agentd.chat.inputs import Place

TASK_PREFIX = "task-"


class TaskInput(Place):
    chat_id: int
    user_id: int
    text: str = Field(max_length=20_000)
    parent: str  # the instance that started it: a turn, a command (/task) or another task
    reply_to: int | None = None  # the message whose answer this result is
    tools: list[str] = Field(default_factory=list)  # the only tools it may call
    max_steps: int = Field(ge=1, le=100)
    token_budget: int = Field(ge=1)
    depth: int = Field(default=1, ge=1)
    # Outside content the starting turn had read: the task starts as tainted as it was
    # (agent/taint.py), so delegating cannot launder it.
    tainted_by: list[str] = Field(default_factory=list)


class TaskOutput(BaseModel):
    outcome: Literal["done", "step_limit", "budget", "rate_limited"]
    text: str
    tokens: int = 0
    message_id: int | None = None


def task_instance_id(parent: str, call_id: str) -> str:
    """Derived from what started it, so starting it again (a replayed call) starts nothing."""
    return TASK_PREFIX + hashlib.sha256(f"{parent}:{call_id}".encode()).hexdigest()[:12]


def task_key(instance_id: str) -> str:
    """Each task its own key: tasks run beside their chat and beside each other."""
    return instance_id
