"""Running tool calls: validation, errors, timeouts, digests and safe rendering (R-TOOL-5)."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from agentd.runtime.redact import Redactor
from agentd.tools import (
    ToolContext,
    ToolError,
    ToolResult,
    args_digest,
    execute,
    render_args,
    tool,
)

CTX = ToolContext(chat_id=1, chat_kind="private", user_id=2, instance_id="test")


@tool()
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool()
async def explode(message: str) -> str:
    """Raise an exception whose message has several lines."""
    raise RuntimeError(f"{message}\nTraceback-like detail that must not leak")


@tool()
async def refuse(reason: str) -> str:
    """Report a failure the model should read."""
    raise ToolError(f"cannot do that: {reason}")


@tool()
async def soft_fail() -> ToolResult:
    """Return an error result without raising."""
    return ToolResult(content="quota exceeded", is_error=True)


@tool(timeout=0.2)
async def hang() -> str:
    """Never finish."""
    await asyncio.sleep(3600)
    return "unreachable"


SIGNALS: dict[str, asyncio.Event] = {}  # one per test: an asyncio.Event binds to a loop


@tool()
async def hang_signalled() -> str:
    """Say it has started, then never finish (no timeout of its own)."""
    SIGNALS["hanging"].set()
    await asyncio.sleep(3600)
    return "unreachable"


@tool(timeout=0.2)
async def stubborn() -> str:
    """Ignore the first cancellation, then finish."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.1)  # the tool's own behaviour under test: it finishes late
    return "too late"


class Point(BaseModel):
    x: int
    y: int


@tool()
async def make_point(x: int, y: int) -> Point:
    """Return a model, serialised as JSON."""
    return Point(x=x, y=y)


@tool()
async def leak(ctx: ToolContext) -> str:
    """Return a secret, which must be redacted on the way out."""
    return "token is sk-secret-123456"


async def test_valid_call() -> None:
    outcome = await execute(add, CTX, {"a": 2, "b": "3"})
    assert outcome.ok and outcome.content == "5" and outcome.error_kind is None
    assert outcome.duration_ms >= 0


async def test_invalid_arguments_are_explained_not_raised() -> None:
    outcome = await execute(add, CTX, {"a": "two", "c": 1})
    assert not outcome.ok and outcome.error_kind == "invalid_arguments"
    assert "- a: Input should be a valid integer" in outcome.content
    assert "- b: Field required" in outcome.content
    assert "- c: Extra inputs are not permitted" in outcome.content
    assert "errors.pydantic.dev" not in outcome.content


async def test_arguments_that_are_not_an_object() -> None:
    outcome = await execute(add, CTX, ["a", 1])
    assert not outcome.ok and outcome.error_kind == "invalid_arguments"


async def test_raising_tool_gives_a_short_error() -> None:
    outcome = await execute(explode, CTX, {"message": "disk full"})
    assert not outcome.ok and outcome.error_kind == "exception"
    assert outcome.content == "explode failed with RuntimeError: disk full"


async def test_tool_error_goes_to_the_model_verbatim() -> None:
    outcome = await execute(refuse, CTX, {"reason": "no"})
    assert not outcome.ok and outcome.error_kind == "tool_error"
    assert outcome.content == "cannot do that: no"
    soft = await execute(soft_fail, CTX, {})
    assert not soft.ok and soft.error_kind == "tool_error" and soft.content == "quota exceeded"


async def test_hanging_tool_is_cut_off_by_its_timeout() -> None:
    started = time.monotonic()
    outcome = await execute(hang, CTX, {})
    assert time.monotonic() - started < 30  # cut off, not hung (speed is for benchmarks)
    assert not outcome.ok and outcome.error_kind == "timeout"
    assert "did not finish within 0.2 s" in outcome.content


async def test_tool_that_swallows_cancellation_still_times_out() -> None:
    outcome = await execute(stubborn, CTX, {})
    assert outcome.error_kind == "timeout"


async def test_cancelling_the_caller_cancels_the_tool() -> None:
    started = SIGNALS["hanging"] = asyncio.Event()
    task = asyncio.create_task(execute(hang_signalled, CTX, {}))
    await asyncio.wait_for(started.wait(), 5)  # the tool is running
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1)
    assert done and task.cancelled()


async def test_results_are_text_and_redacted_and_clipped() -> None:
    point = await execute(make_point, CTX, {"x": 1, "y": 2})
    assert point.content == '{"x":1,"y":2}'
    ctx = ToolContext(
        chat_id=1,
        chat_kind="private",
        user_id=2,
        instance_id="t",
        redact=Redactor(["sk-secret-123456"]),
    )
    leaked = await execute(leak, ctx, {})
    assert leaked.content == "token is [REDACTED]"
    clipped = await execute(leak, CTX, {}, max_chars=5)
    assert clipped.content.startswith("token\n[… ")


def test_outcome_round_trips_through_json() -> None:
    # Outcomes are journaled step results: they must survive JSON.
    from agentd.tools import ToolOutcome

    outcome = ToolOutcome(ok=False, content="x", error_kind="timeout", duration_ms=1.5)
    assert ToolOutcome.model_validate_json(outcome.model_dump_json()) == outcome


def test_args_digest_is_canonical() -> None:
    assert args_digest({"b": 1, "a": [1, "é"]}) == args_digest({"a": [1, "é"], "b": 1})
    assert args_digest({"a": 1}) != args_digest({"a": 2})
    assert len(args_digest({})) == 64


def test_render_args_is_truncated_and_neutralises_invisible_characters() -> None:
    text = render_args({"path": "/tmp/\u202egnp.exe", "body": "x" * 1000, "n": [1, 2]})
    lines = text.splitlines()
    assert lines[0] == "path: /tmp/\\u202egnp.exe"
    assert lines[1].startswith("body: " + "x" * 400 + "… (600 more characters)")
    assert lines[2] == "n: [1, 2]"
    assert render_args({}) == "(no arguments)"
    long = render_args({f"k{i}": "v" * 300 for i in range(20)}, limit=500)
    assert len(long) < 600 and long.endswith("more characters)")
