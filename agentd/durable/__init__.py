"""Durable execution: workflows whose steps are journaled in SQLite and resume after a crash.

Side effects (R-DUR-7): a step's effect is at-least-once only in the window between the external
call returning and its result being committed (fsync'd), one SQLite transaction later. A step
declared `delivery="at_most_once"` journals its attempt before the call; if the process dies
before the result is committed, the step is not repeated and the workflow sees OutcomeUnknown
instead. Database-only steps (`step.local`) and idempotent ones (`delivery="idempotent"`) cost
no fsync of their own: see Step for what each kind commits.
"""

from agentd.durable.clock import Clock, FakeClock, SystemClock
from agentd.durable.engine import Engine, StartResult, Workflow, workflow
from agentd.durable.errors import (
    DivergenceError,
    InstanceNotFound,
    InvalidInput,
    LimitExceeded,
    NonRetryable,
    OutcomeUnknown,
    StepFailed,
    WorkflowNotFound,
)
from agentd.durable.host import Limits
from agentd.durable.step import Event, LocalStep, Retry, Step

__all__ = [
    "Clock",
    "DivergenceError",
    "Engine",
    "Event",
    "FakeClock",
    "InstanceNotFound",
    "InvalidInput",
    "LimitExceeded",
    "Limits",
    "LocalStep",
    "NonRetryable",
    "OutcomeUnknown",
    "Retry",
    "StartResult",
    "Step",
    "StepFailed",
    "SystemClock",
    "Workflow",
    "WorkflowNotFound",
    "workflow",
]
