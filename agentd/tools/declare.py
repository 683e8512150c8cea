"""Declaring tools: `@tool` and the one place a declaration becomes a `Tool`.

A tool is a typed async function: its schema comes from the signature, its description from
the docstring, and everything else about it (risk, timeout, taints, egress, at-most-once,
assess, card, settle) from the declaration. Groups of tools are declared on a Toolset
(toolset.py), which goes through the same `declare`.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict, create_model

from agentd.config import Risk
from agentd.tools.base import (
    ApprovalCard,
    Assessment,
    AsyncFn,
    CallState,
    Tool,
    ToolContext,
    ToolDeclarationError,
    ToolFn,
    ToolResult,
)


def _is_context(annotation: Any) -> bool:
    return annotation is ToolContext


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


@dataclass(frozen=True)
class Flags:
    """What a declaration says about one tool besides its function; see `tool` for each."""

    risk: Risk | None = None
    timeout: float | None = None
    taints: bool = False
    egress: bool = False
    at_most_once: bool = False
    assess: Callable[[Any, CallState], Assessment | None] | None = None
    card: Callable[[Any], ApprovalCard | None] | None = None
    settle: Callable[[ToolContext, Any], Awaitable[ToolResult]] | None = None
    preview: Callable[[ToolContext, Any], Awaitable[ApprovalCard | None]] | None = None
    steps: int | None = None
    offered: Callable[[Any, int], bool] | None = None


class FlagArgs(TypedDict, total=False):
    """The flags as `@tool`, `Toolset.tool` and `Toolset.add_model` take them (keywords);
    `tool`'s docstring says what each means."""

    risk: Risk | None
    timeout: float | None
    taints: bool
    egress: bool
    at_most_once: bool
    assess: Callable[[Any, CallState], Assessment | None] | None
    card: Callable[[Any], ApprovalCard | None] | None
    settle: Callable[[ToolContext, Any], Awaitable[ToolResult]] | None
    preview: Callable[[ToolContext, Any], Awaitable[ApprovalCard | None]] | None
    steps: int | None
    offered: Callable[[Any, int], bool] | None


def flags_of(given: FlagArgs, where: str) -> Flags:
    """Flags from a declaration's keywords; an unknown one (a typo) is refused here."""
    unknown = sorted(set(given) - {f.name for f in fields(Flags)})
    if unknown:
        raise ToolDeclarationError(
            f"{where}: unknown flag(s) {', '.join(unknown)}; the flags are those of Flags"
        )
    return Flags(**given)


# Wraps a tool's call (and its settle) in what its group shares: a guard, error mapping.
Wrap = Callable[[ToolFn], ToolFn]


def _unwrapped(fn: ToolFn) -> ToolFn:
    return fn


def build(
    *,
    name: str,
    description: str,
    args_model: type[BaseModel],
    fn: ToolFn,
    flags: Flags,
    source: str,
    default_timeout: float = 30.0,
    default_steps: int = 0,
    wrap: Wrap = _unwrapped,
    guard: Callable[[ToolContext], str | None] | None = None,
) -> Tool:
    """The one place a declaration (`@tool`, a Toolset) becomes a Tool. `wrap` and `guard` are
    its Toolset's: the guard runs inside `wrap` before each call, and is kept on the Tool so the
    tool loop does not offer it where it refuses every call."""
    return Tool.from_model(
        name=name,
        description=description,
        args_model=args_model,
        fn=wrap(fn),
        risk=flags.risk,
        timeout=default_timeout if flags.timeout is None else flags.timeout,
        source=source,
        taints=flags.taints,
        egress=flags.egress,
        at_most_once=flags.at_most_once,
        assess=flags.assess,
        card=flags.card,
        settle=None if flags.settle is None else wrap(flags.settle),
        preview=flags.preview,
        steps=default_steps if flags.steps is None else flags.steps,
        offered=flags.offered,
        guard=guard,
    )


def _signature(fn: AsyncFn, where: str, tool_name: str) -> tuple[type[BaseModel], ToolFn]:
    """The arguments' model and a `(ctx, args)` call, from the function's signature."""
    if not inspect.iscoroutinefunction(fn):
        raise ToolDeclarationError(f"{where} must be an async def function")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolDeclarationError(f"{where}: cannot resolve type hints ({exc})") from None
    params = list(inspect.signature(fn).parameters.values())
    takes_ctx = bool(params) and _is_context(hints.get(params[0].name))
    rest = params[1:] if takes_ctx else params
    for param in rest:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDeclarationError(f"{where}: *args and **kwargs are not allowed")
        if param.name not in hints:
            raise ToolDeclarationError(f"{where}: parameter {param.name!r} needs a type hint")
        if _is_context(hints[param.name]):
            raise ToolDeclarationError(f"{where}: the ToolContext must be the first parameter")

    if len(rest) == 1 and _is_model(hints[rest[0].name]):

        async def call_with_model(ctx: ToolContext, args: Any) -> Any:
            return await (fn(ctx, args) if takes_ctx else fn(args))

        return hints[rest[0].name], call_with_model
    if any(_is_model(hints[p.name]) for p in rest):
        raise ToolDeclarationError(
            f"{where}: a pydantic model argument must be the only argument besides the context"
        )
    fields: dict[str, Any] = {
        p.name: (hints[p.name], ... if p.default is p.empty else p.default) for p in rest
    }
    try:
        model = create_model(
            f"{tool_name}_args",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
    except Exception as exc:
        raise ToolDeclarationError(f"{where}: unusable argument types ({exc})") from None
    names = [p.name for p in rest]

    async def call_with_fields(ctx: ToolContext, args: Any) -> Any:
        kwargs = {n: getattr(args, n) for n in names}
        return await (fn(ctx, **kwargs) if takes_ctx else fn(**kwargs))

    return model, call_with_fields


def declare(
    fn: AsyncFn,
    *,
    name: str | None,
    description: str | None,
    flags: Flags,
    source: str,
    default_timeout: float = 30.0,
    default_steps: int = 0,
    wrap: Wrap = _unwrapped,
    guard: Callable[[ToolContext], str | None] | None = None,
) -> Tool:
    """A Tool from a typed async function: schema from its signature, description from its
    docstring (unless given). Used by `@tool` and `Toolset.tool`."""
    tool_name = name or fn.__name__
    where = f"tool {tool_name!r} ({fn.__module__}.{fn.__qualname__})"
    doc = description or inspect.getdoc(fn) or ""
    if not doc.strip():
        raise ToolDeclarationError(f"{where} needs a docstring: it is what the model reads")
    model, call = _signature(fn, where, tool_name)
    try:
        return build(
            name=tool_name,
            description=doc.strip(),
            args_model=model,
            fn=call,
            flags=flags,
            source=source,
            default_timeout=default_timeout,
            default_steps=default_steps,
            wrap=wrap,
            guard=guard,
        )
    except ToolDeclarationError as exc:
        raise ToolDeclarationError(f"{exc} ({fn.__module__}.{fn.__qualname__})") from None


@typing.overload
def tool(fn: AsyncFn, /) -> Tool: ...


@typing.overload
def tool(
    *, name: str | None = None, description: str | None = None, **flags: Unpack[FlagArgs]
) -> Callable[[AsyncFn], Tool]: ...


def tool(
    fn: AsyncFn | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    **flags: Unpack[FlagArgs],
) -> Tool | Callable[[AsyncFn], Tool]:
    """Declare an async function as a tool (`@tool` or `@tool(risk=...)`).

    The function takes an optional first `ctx: ToolContext`, then either one pydantic model
    or plain typed parameters (`Annotated[..., Field(description=...)]` documents them). Its
    docstring is the description the model reads, unless `description` is given.

    Everything about the tool is said here, never patched on later:

    - `name`: what the model calls it (default: the function's name).
    - `risk`: "low" runs at once, "medium" runs and is reported, "high" asks an approver.
      Left unsaid, it is low, but a plugin's tool then counts as high (tools/plugins.py).
    - `timeout`: seconds one call may take (default 30; a Toolset's own default in a group).
    - `taints`: its results are outside content (a web page, a mail): the turn is tainted
      from then on, and the model reads them wrapped as untrusted data. A tool whose results
      only sometimes are (memory search) leaves it unsaid and returns
      `ToolResult(..., outside=True)` for those.
    - `egress`: it can send data out or leave instructions behind (send, fetch, schedule,
      remember): in a tainted turn it asks the owner (tools/policy.py).
    - `at_most_once`: running it twice is worse than asking again (a command, a write): after
      a crash during it the turn reports "outcome unknown" and never reruns it.
    - `assess(args, state)`: this call's risk where it depends on the arguments; None: `risk`.
    - `card(args)`: the approval card's content for a call; None: its arguments.
    - `settle(ctx, args)`: async; after a crash during an approved call, finds out whether
      its effect happened (needs `at_most_once`).
    - `preview(ctx, args)`: async; the card of a call that needs live state to show what it
      will do (a page's URL, the element, a screenshot), run as a step before asking.
    - `steps`: model calls a turn that calls it may take in all, where its work needs more
      than `[llm] max_steps` by nature (the browser: a call per field); default 0, none.
    - `offered(conn, chat_id)`: offered to the model only in chats where this read holds (a
      tool about a file the user sent, where one was sent); default: in every chat.

    A bad declaration raises ToolDeclarationError here, not when the tool is called. Tools
    that share a source, a timeout, a guard or error mapping are declared on a Toolset.
    """
    declared = flags_of(flags, f"@tool({name or ''})")

    def decorate(func: AsyncFn) -> Tool:
        source = f"python:{func.__module__}"
        return declare(func, name=name, description=description, flags=declared, source=source)

    return decorate if fn is None else decorate(fn)
