"""Automations the owner writes: durable workflows in plugin files, started and signalled from
the CLI, chat, the model and webhooks (docs/workflows.md). The public API is re-exported here.
"""

from agentd.automations.api import (
    AsTool,
    Automation,
    AutoStep,
    Event,
    NonRetryable,
    OutcomeUnknown,
    Retry,
    RunState,
    StepFailed,
    ToolRun,
    workflow,
)

__all__ = [
    "AsTool",
    "AutoStep",
    "Automation",
    "Event",
    "NonRetryable",
    "OutcomeUnknown",
    "Retry",
    "RunState",
    "StepFailed",
    "ToolRun",
    "workflow",
]
