"""Tools the model can call: typed async functions under a risk policy (SPEC §5).

Declare one with `@tool`, or a group with a `Toolset` (shared source, timeout, guard and
error mapping), build the registry with `ToolRegistry.build(config.tools, ...)`,
run a call with `execute(tool, ctx, raw_args)`. A tool that returns an `OutgoingFile` has the
file sent to the user as a Telegram document with the reply.
"""

from agentd.chat.outfiles import OutgoingFile
from agentd.tools.base import (
    ApprovalCard,
    Assessment,
    CallState,
    InvalidArguments,
    Tool,
    ToolContext,
    ToolDeclarationError,
    ToolError,
    ToolProblem,
    ToolRefused,
    ToolResult,
    mark_untrusted,
)
from agentd.tools.declare import tool
from agentd.tools.execute import (
    OWN_WORDS,
    ToolOutcome,
    args_digest,
    check_args,
    execute,
    render_args,
)
from agentd.tools.mcp import McpServers
from agentd.tools.policy import call_risk
from agentd.tools.registry import DuplicateToolError, ToolRegistry
from agentd.tools.toolset import Guard, OwnerOnly, Toolset

__all__ = [
    "OWN_WORDS",
    "ApprovalCard",
    "Assessment",
    "CallState",
    "DuplicateToolError",
    "Guard",
    "InvalidArguments",
    "McpServers",
    "OutgoingFile",
    "OwnerOnly",
    "Tool",
    "ToolContext",
    "ToolDeclarationError",
    "ToolError",
    "ToolOutcome",
    "ToolProblem",
    "ToolRefused",
    "ToolRegistry",
    "ToolResult",
    "Toolset",
    "args_digest",
    "call_risk",
    "check_args",
    "execute",
    "mark_untrusted",
    "render_args",
    "tool",
]
