"""Ways the daemon dies on purpose, for the kill -9 tests.

`crash_now`: a plugin tool that kills the daemon every time it runs (the crash loop the engine
parks). And, when `AGENTD_TEST_KILL_AT` names a step, the daemon kills itself once as the
journal is about to commit that step's result: inside the writer's transaction, after the
step's effect (a model's answer) and before its commit, a window no fake outside the process
can hold open. `AGENTD_TEST_KILL_ONCE` is a file made just before: the restarted daemon finds
it and goes on.

`AGENTD_TEST_KILL_AT_REPLY`: the daemon kills itself as it is about to send a message that
begins with this text (a /stop's "Stopped working on"), the moment it says something is done.
`AGENTD_TEST_SLOW_STOP`: seconds a stopped answer stream takes to end (its connection slow to
close, as over a slow link), so whatever follows a stop gets there first if it does not wait.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from agentd.chat import delivery
from agentd.durable import store
from agentd.llm.anthropic_adapter import AnthropicLLM
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


def _dying_at_reply(prefix: str) -> Any:
    send_chunk = delivery._send_chunk

    async def send(outbox: Any, chat_id: int, chunk: str, *args: Any) -> int:
        if chunk.startswith(prefix):
            os.kill(os.getpid(), signal.SIGKILL)
        return await send_chunk(outbox, chat_id, chunk, *args)

    return send


def _slow_to_stop(seconds: float) -> Any:
    stream = AnthropicLLM._stream

    async def slowed(self: AnthropicLLM, *args: Any) -> Any:
        try:
            return await stream(self, *args)
        except asyncio.CancelledError:
            await asyncio.sleep(seconds)
            raise

    return slowed


if prefix := os.environ.get("AGENTD_TEST_KILL_AT_REPLY"):
    delivery._send_chunk = _dying_at_reply(prefix)
if slow := os.environ.get("AGENTD_TEST_SLOW_STOP"):
    AnthropicLLM._stream = _slow_to_stop(float(slow))  # type: ignore[method-assign]
