"""Errors a workflow or its caller can see from the durable engine."""

from __future__ import annotations


class DurableError(Exception):
    """Base class for engine errors."""


class NonRetryable(DurableError):
    """Raise inside a step function to fail the step at once, without further attempts."""


class StepFailed(DurableError):
    """A step ran out of attempts (or failed non-retryably); the same error replays identically."""

    def __init__(self, step: str, error_type: str, message: str) -> None:
        super().__init__(f"step {step!r} failed: {error_type}: {message}")
        self.step = step
        self.error_type = error_type
        self.message = message


class OutcomeUnknown(DurableError):
    """An at-most-once step was interrupted after it started: it may or may not have happened."""

    def __init__(self, step: str) -> None:
        super().__init__(
            f"step {step!r} was interrupted after it started; it was not repeated because it "
            "runs at most once, so its outcome is unknown"
        )
        self.step = step


class DivergenceError(DurableError):
    """The workflow code asked for different steps than the journal recorded."""


class LimitExceeded(DurableError):
    """A configured engine limit (result size, steps per instance, input size) was hit."""


class WorkflowNotFound(DurableError):
    """No workflow is registered under that name."""


class InstanceNotFound(DurableError):
    """No workflow instance has that id."""


class InvalidInput(DurableError):
    """The workflow input failed validation; no instance was created."""


class CancelRequested(DurableError):
    """A marked or at-most-once step was about to begin in an instance flagged for cancel:
    its row is not written and its effect does not happen (the cancel won the race)."""


class Suspended(BaseException):
    """Raised inside a workflow when the engine is shutting down: leave the instance resumable."""
