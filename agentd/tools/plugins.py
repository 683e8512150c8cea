"""Plugins: Python modules named in `[tools] plugins`, whose top-level `@tool`s are registered.

A plugin is an importable module (on PYTHONPATH or installed)::

    from typing import Annotated
    from pydantic import Field
    from agentd.tools import ToolContext, tool

    @tool(risk="medium")
    async def add_note(ctx: ToolContext, text: Annotated[str, Field(description="Note")]) -> str:
        \"\"\"Append a note to the owner's notes file.\"\"\"
        ...

Every `Tool` object at the module's top level is registered, and every tool of a top-level
`Toolset`; how far they are trusted is decided in one place, `as_plugin`. A module that cannot be
imported or declares a bad tool is reported as a problem; the others load as usual.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from types import ModuleType

from agentd.tools.base import Tool, ToolDeclarationError, ToolProblem
from agentd.tools.capability import Context, Contribution, Simple
from agentd.tools.toolset import Toolset

log = logging.getLogger(__name__)


def _import_error(name: str, exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name and name.startswith(exc.name):
        return f"module {name!r} not found (is it installed or on PYTHONPATH?)"
    if isinstance(exc, ToolDeclarationError):
        return f"bad tool declaration: {exc}"
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"import failed: {type(exc).__name__}: {first}"


def as_plugin(declared: Tool, source: str) -> Tool:
    """A plugin's tool as agentd offers it: the one place its trust is decided.

    agentd cannot know what outside code does. A tool that does not say its risk (`@tool`
    alone) is high, so it asks the owner before each run (the MCP default is high for the same
    reason). Any of its code may reach the network, so it is egress (asks in a tainted turn)
    whatever it declared; whether its results are outside content (`taints`) is its call.
    """
    risk = declared.risk if declared.risk_declared else "high"
    return declared.loaded_as(source, risk=risk, egress=True)


def _declared(module: ModuleType) -> list[Tool]:
    found: list[Tool] = []
    for obj in vars(module).values():
        if isinstance(obj, Tool):
            found.append(obj)
        elif isinstance(obj, Toolset):
            found.extend(obj.tools())
    return found


def load_plugins(
    modules: Iterable[str],
    *,
    import_module: Callable[[str], ModuleType] = importlib.import_module,
) -> tuple[list[Tool], list[ToolProblem]]:
    """Import each plugin module and collect its tools; failures become problems, never raise."""
    tools: list[Tool] = []
    problems: list[ToolProblem] = []
    for name in modules:
        source = f"plugin:{name}"
        try:
            module = import_module(name)
        except (Exception, SystemExit) as exc:
            log.warning("plugin failed to load", exc_info=True, extra={"plugin": name})
            problems.append(ToolProblem(source, _import_error(name, exc)))
            continue
        found = _declared(module)
        if not found:
            problems.append(ToolProblem(source, "the module defines no tools"))
        tools.extend(as_plugin(obj, source) for obj in found)
    return tools, problems


async def _build(ctx: Context) -> Contribution:
    tools, problems = load_plugins(ctx.config.tools.plugins)
    return Contribution(
        tools=tools,
        problems=[f"{p.source}: {p.message}" for p in problems],
        about="use the tools of your plugins",
    )


def capability() -> Simple:
    """The owner's tool plugins (`[tools] plugins`): the same door as every built-in."""
    return Simple("plugins", build=_build)
