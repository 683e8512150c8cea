"""Ways the daemon dies on purpose, for the kill -9 tests.

`crash_now`: a plugin tool that kills the daemon every time it runs (the crash loop the engine
parks). And, when `AGENTD_TEST_KILL_AT` names a step, the daemon kills itself once as the
journal is about to commit that step's result: inside the writer's transaction, after the
step's effect (a model's answer) and before its commit, a window no fake outside the process
can hold open. `AGENTD_TEST_KILL_ONCE` is a file made just before: the restarted daemon finds
it and goes on.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from agentd.durable import store
from agentd.tools import ToolContext, tool


@tool(risk="low")
async def crash_now(ctx: ToolContext) -> str:
    """Stand-in for a parser a hostile file kills: the process dies in the middle of the step."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


def _dying_at(step: str, once: Path) -> Any:
    record_step = store.record_step

    def record(conn: Any, instance_id: str, ordinal: int, name: str, **fields: Any) -> None:
        if name == step and fields.get("status", "complete") == "complete" and not once.exists():
            once.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        record_step(conn, instance_id, ordinal, name, **fields)

    return record


if step := os.environ.get("AGENTD_TEST_KILL_AT"):
    store.record_step = _dying_at(step, Path(os.environ["AGENTD_TEST_KILL_ONCE"]))
