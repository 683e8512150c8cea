"""Running one tool call: validate, run under a timeout, and always come back with an outcome."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import unicodedata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentd.chat.outfiles import OutgoingFile, SpooledFile, describe_for_model, spool
from agentd.tools.base import (
    InvalidArguments,
    Tool,
    ToolContext,
    ToolError,
    ToolRefused,
    ToolResult,
)

log = logging.getLogger(__name__)

ErrorKind = Literal[
    "unknown_tool", "invalid_arguments", "refused", "tool_error", "exception", "timeout"
]
# Failures said in agentd's own words: the call never reached the tool, or was stopped at its
# time limit. Any other failure may quote what the tool met (a server's error, a redirect's
# target), so a tool whose results are outside content taints with its errors too.
OWN_WORDS: frozenset[ErrorKind] = frozenset(
    {"unknown_tool", "invalid_arguments", "refused", "timeout"}
)

# A tool that ignores cancellation gets this long to unwind before the call is abandoned.
_CANCEL_GRACE = 1.0


class ToolOutcome(BaseModel):
    """What a tool call produced, as it goes back to the model (and into the journal)."""

    ok: bool
    content: str
    error_kind: ErrorKind | None = None
    duration_ms: float = 0.0
    files: list[SpooledFile] = Field(default_factory=list)  # to send with the reply
    outside: bool = False  # the result said it holds outside content (ToolResult.outside)

    @property
    def is_error(self) -> bool:
        return not self.ok


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit} more characters cut]"


def _short(exc: BaseException) -> str:
    # The first line only: enough for the model to react, no traceback, no dumped state.
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def unknown_tool(name: str, available: list[str]) -> ToolOutcome:
    """The outcome for a call to a tool that is not registered."""
    listed = ", ".join(sorted(available)) or "none"
    return ToolOutcome(
        ok=False,
        content=f"There is no tool named {name[:64]!r}. Available tools: {listed}.",
        error_kind="unknown_tool",
    )


async def _run(tool: Tool, ctx: ToolContext, args: Any) -> tuple[Any, bool]:
    """Run with the tool's timeout; (result, False) when it timed out, even ignoring cancel."""
    task = asyncio.ensure_future(tool.fn(ctx, args))
    try:
        done, _ = await asyncio.wait({task}, timeout=tool.timeout)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if done:
        return task.result(), True
    task.cancel()
    await asyncio.wait({task}, timeout=_CANCEL_GRACE)
    if not task.done():
        log.warning("tool ignored cancellation and was abandoned", extra={"tool": tool.name})
    else:
        # Consume the task's exception so asyncio does not log it as never retrieved.
        _ = task.cancelled() or task.exception()
    return None, False


def check_args(tool: Tool, raw_args: Any) -> Any:
    """The parsed arguments, or an error outcome saying what to fix (used before approvals too)."""
    if not isinstance(raw_args, dict):
        return ToolOutcome(
            ok=False, content="Arguments must be a JSON object.", error_kind="invalid_arguments"
        )
    try:
        return tool.parse_args(raw_args)
    except InvalidArguments as exc:
        return ToolOutcome(
            ok=False,
            content=f"Invalid arguments for {tool.name}:\n{exc}\nFix them and try again.",
            error_kind="invalid_arguments",
        )
    except Exception as exc:
        # A validator that breaks (an odd MCP schema) must not take the turn down.
        log.warning("argument validation failed", exc_info=True, extra={"tool": tool.name})
        return ToolOutcome(
            ok=False,
            content=f"Arguments could not be checked: {_short(exc)}",
            error_kind="exception",
        )


async def execute(
    tool: Tool, ctx: ToolContext, raw_args: Any, *, max_chars: int = 100_000
) -> ToolOutcome:
    """Validate, run under the tool's timeout, and turn every failure into an error outcome."""
    started = time.perf_counter()

    def outcome(ok: bool, content: str, kind: ErrorKind | None = None) -> ToolOutcome:
        return ToolOutcome(
            ok=ok,
            content=_clip(ctx.redact(content), max_chars),
            error_kind=kind,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    checked = check_args(tool, raw_args)
    if isinstance(checked, ToolOutcome):
        return outcome(False, checked.content, checked.error_kind)
    args = checked
    try:
        result, finished = await _run(tool, ctx, args)
    except ToolRefused as exc:
        return outcome(False, str(exc), "refused")
    except ToolError as exc:
        return outcome(False, str(exc) or f"{tool.name} failed", "tool_error")
    except Exception as exc:
        log.warning("tool raised", exc_info=True, extra={"tool": tool.name})
        return outcome(False, f"{tool.name} failed with {_short(exc)}", "exception")
    if not finished:
        return outcome(
            False,
            f"{tool.name} did not finish within {tool.timeout:g} s and was stopped.",
            "timeout",
        )
    if isinstance(result, OutgoingFile):
        if not ctx.outgoing_dir:
            return outcome(
                False, f"{tool.name} produced a file, but files cannot be sent here.", "tool_error"
            )
        spooled = await asyncio.to_thread(spool, result, Path(ctx.outgoing_dir))
        done = outcome(True, describe_for_model(spooled))
        return done.model_copy(update={"files": [spooled]})
    if isinstance(result, ToolResult):
        if result.is_error:
            return outcome(False, result.content, "tool_error")
        return outcome(True, result.content).model_copy(update={"outside": result.outside})
    return outcome(True, _as_text(result))


def args_digest(raw_args: Any) -> str:
    """sha256 of the arguments' canonical JSON, so the audit log can match calls without them."""
    canonical = json.dumps(
        raw_args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _neutralise(text: str) -> str:
    # Control and format characters (bidi overrides, zero-width joiners) could make an
    # approval request show something other than what will run: show them escaped.
    out = []
    for ch in text:
        if ch in "\n\t" or unicodedata.category(ch)[0] not in "CZ" or ch == " ":
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def _render_value(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = _neutralise(text)
    if len(text) > limit:
        text = text[:limit] + f"… ({len(text) - limit} more characters)"
    return text


def render_args(raw_args: Any, *, limit: int = 1500, value_limit: int = 400) -> str:
    """A readable, truncated `key: value` rendering for an approval request (not escaped)."""
    if isinstance(raw_args, dict):
        if not raw_args:
            return "(no arguments)"
        lines = [
            f"{_neutralise(str(key))[:64]}: {_render_value(value, value_limit)}"
            for key, value in raw_args.items()
        ]
        text = "\n".join(lines)
    else:
        text = _render_value(raw_args, value_limit)
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return text
