"""A toolset: tools that share where they come from, a default timeout, an access guard and
which exceptions the model is told about, declared together and yielded as plain `Tool`s.

    mail = Toolset(timeout=120.0, guard=OwnerOnly.of(config.access, NOT_THE_OWNERS),
                   errors=(MailError,))

    @mail.tool(risk="medium")
    async def mail_move(ctx: ToolContext, args: MoveArgs) -> str:
        \"\"\"Move messages to another folder (e.g. Archive).\"\"\"

    registry = ToolRegistry(mail.tools())

Each tool says everything about itself at its declaration, with the flags of `@tool`; the
group's guard runs before every call (and before a settle; where it refuses whoever asks, a
group chat say, the tool loop does not offer the tools), and an exception named in
`errors` reaches the model as a ToolError with its message. A plugin module may declare a
Toolset at its top level too: its tools load like the module's `@tool`s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Unpack

from pydantic import BaseModel

from agentd.access import owners
from agentd.config import AccessConfig
from agentd.tools.base import (
    AsyncFn,
    Tool,
    ToolContext,
    ToolDeclarationError,
    ToolError,
    ToolFn,
    ToolRefused,
)
from agentd.tools.declare import FlagArgs, build, declare, flags_of

# Why a call may not run here (what the model is told), or None to let it run.
Guard = Callable[[ToolContext], str | None]


@dataclass(frozen=True)
class OwnerOnly:
    """The owner's data stays the owner's: a call runs only when the owner (access/owners.py)
    makes it in a private chat. Anyone else, or a group, where every member would read the
    answer, gets `refusal`."""

    owner_id: int | None
    refusal: str

    @classmethod
    def of(cls, access: AccessConfig, refusal: str) -> OwnerOnly:
        return cls(owner_id=owners.resolve(access).owner_id, refusal=refusal)

    def __call__(self, ctx: ToolContext) -> str | None:
        mine = self.owner_id is not None and ctx.private and ctx.user_id == self.owner_id
        return None if mine else self.refusal


class Toolset:
    """A group of tools declared with shared defaults (like pydantic-ai's FunctionToolset)."""

    def __init__(
        self,
        source: str = "builtin",
        *,
        timeout: float = 30.0,
        guard: Guard | None = None,
        errors: tuple[type[Exception], ...] = (),
        steps: int = 0,
    ) -> None:
        """`source` names the group in problems and the audit log (builtin, skills,
        automation:<file>); `timeout` is each tool's unless it says its own; `guard` runs
        before every call; `errors` are the exceptions whose message the model is told; `steps`
        is each tool's allowance of model calls unless it says its own (`@tool`'s `steps`)."""
        if not timeout > 0:
            raise ToolDeclarationError(f"toolset {source!r}: timeout must be positive")
        self.source = source
        self.timeout = timeout
        self.steps = steps
        self.guard = guard
        self.errors = errors
        self._tools: dict[str, Tool] = {}

    def tools(self) -> list[Tool]:
        """The declared tools, in the order they were declared."""
        return list(self._tools.values())

    def tool(
        self, *, name: str | None = None, description: str | None = None, **flags: Unpack[FlagArgs]
    ) -> Callable[[AsyncFn], Tool]:
        """Declare a tool of this group (`@toolset.tool(risk=...)`); the flags are `@tool`'s.
        The decorated name is the Tool, which the group also keeps."""
        declared = flags_of(flags, f"toolset {self.source!r}, tool {name or ''}")

        def decorate(func: AsyncFn) -> Tool:
            made = declare(
                func,
                name=name,
                description=description,
                flags=declared,
                source=self.source,
                default_timeout=self.timeout,
                default_steps=self.steps,
                wrap=self._wrap,
                guard=self.guard,
            )
            return self._keep(made)

        return decorate

    def add_model(
        self,
        *,
        name: str,
        description: str,
        args_model: type[BaseModel],
        fn: ToolFn,
        **flags: Unpack[FlagArgs],
    ) -> Tool:
        """A tool whose arguments' model is known only at run time (an automation's input):
        `fn(ctx, args)` gets the validated model. The flags are `@tool`'s."""
        declared = flags_of(flags, f"toolset {self.source!r}, tool {name}")
        made = build(
            name=name,
            description=description,
            args_model=args_model,
            fn=fn,
            flags=declared,
            source=self.source,
            default_timeout=self.timeout,
            default_steps=self.steps,
            wrap=self._wrap,
            guard=self.guard,
        )
        return self._keep(made)

    def _keep(self, made: Tool) -> Tool:
        if made.name in self._tools:
            raise ToolDeclarationError(
                f"toolset {self.source!r} declares two tools named {made.name!r}"
            )
        self._tools[made.name] = made
        return made

    def _wrap(self, fn: ToolFn) -> ToolFn:
        """`fn` behind the group's guard and error mapping (nothing to add: `fn` itself)."""
        guard, errors = self.guard, self.errors
        if guard is None and not errors:
            return fn

        async def guarded(ctx: ToolContext, args: Any) -> Any:
            refusal = guard(ctx) if guard is not None else None
            if refusal is not None:
                raise ToolRefused(refusal)
            try:
                return await fn(ctx, args)
            except errors as exc:
                raise ToolError(str(exc)) from None

        return guarded
