"""The tool registry: which tools the model may use, at which risk (R-TOOL-1)."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

from agentd.config import Risk, ToolsConfig
from agentd.tools.base import Tool, ToolProblem
from agentd.tools.builtin import builtin_tools
from agentd.tools.execute import ToolOutcome, unknown_tool
from agentd.tools.plugins import load_plugins

log = logging.getLogger(__name__)


class DuplicateToolError(ValueError):
    """Two tools with one name: the model could not tell them apart."""


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.register(item)

    def register(self, tool: Tool) -> None:
        """Add a tool; a second tool with the same name raises DuplicateToolError."""
        if not isinstance(tool, Tool):
            raise TypeError(f"expected a Tool, got {type(tool).__name__}")
        existing = self._tools.get(tool.name)
        if existing is not None:
            raise DuplicateToolError(
                f"tool {tool.name!r} from {tool.source} clashes with the one from {existing.source}"
            )
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def names(self) -> list[str]:
        return list(self._tools)

    def has_risk(self, risk: Risk) -> bool:
        """Whether any tool has this risk (the system prompt's medium-risk instruction)."""
        return any(t.risk == risk for t in self._tools.values())

    def llm_specs(self) -> list[dict[str, Any]]:
        """Every tool as the Messages API's `tools` parameter wants it."""
        return [t.llm_spec() for t in self._tools.values()]

    def unknown(self, name: str) -> ToolOutcome:
        """The error outcome for a call to a tool that is not here."""
        return unknown_tool(name, self.names())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools())

    @classmethod
    def build(
        cls,
        config: ToolsConfig,
        *,
        builtins: Iterable[Tool] | None = None,
        extra: Iterable[Tool] = (),
        late: Iterable[Tool] = (),
        import_module: Callable[[str], ModuleType] = importlib.import_module,
    ) -> tuple[ToolRegistry, list[ToolProblem]]:
        """Built-ins, `extra` (e.g. MCP tools), plugins, then `late` (built-ins newer than some
        owners' plugins: a plugin tool of the same name keeps its place), with config's risks
        and disabled list.

        Never raises for a broken plugin or a clash: those come back as problems (and are logged).
        """
        tools = list(builtin_tools(config) if builtins is None else builtins)
        tools.extend(extra)
        plugin_tools, problems = load_plugins(config.plugins, import_module=import_module)
        tools.extend(plugin_tools)
        tools.extend(late)

        registry = cls()
        disabled = set(config.disabled)
        for item in tools:
            if item.name in disabled:
                continue
            override = config.risk.get(item.name)
            try:
                registry.register(item.with_risk(override) if override else item)
            except DuplicateToolError as exc:
                problems.append(ToolProblem(item.source, f"{exc}; it was not registered"))

        known = {t.name for t in tools}
        for name in sorted(set(config.risk) - known):
            problems.append(ToolProblem("config", f"[tools.risk] names unknown tool {name!r}"))
        for name in sorted(disabled - known):
            problems.append(ToolProblem("config", f"[tools] disabled names unknown tool {name!r}"))
        for problem in problems:
            log.warning("tool problem: %s", problem)
        return registry, problems
