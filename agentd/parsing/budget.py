"""What a bounded parse may use, and how it fails: light enough for the child to import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Which children's slots a parse waits for: "short" work (a rule search: two seconds of CPU at
# most) has a slot of its own, so a tool waiting on one is never queued behind documents that
# may each take a minute, and past its own time limit.
Lane = Literal["parse", "short"]
SHORT_CPU_SECONDS = 2


class ParseFailed(Exception):
    """The parse did not produce a result; the message says why (fit for the user)."""

    def __init__(self, message: str, *, kind: str = "error", error_type: str = "") -> None:
        super().__init__(message)
        # "error": the parser rejected the input (`error_type` names its exception, the
        # message is that exception's); "limit": it ran out of time or memory; "crash": the
        # child died some other way.
        self.kind = kind
        self.error_type = error_type


@dataclass(frozen=True)
class Budget:
    """What one parse may use. The defaults fit a 2 MB web page or a 20 MB document."""

    # Wall-clock seconds before the child is killed (queueing for a slot not counted).
    seconds: float = 20.0
    # CPU seconds (RLIMIT_CPU): a busy loop dies even if the wall clock is generous.
    cpu_seconds: int = 15
    # Address space in bytes (RLIMIT_AS): a decompression bomb hits MemoryError or dies.
    memory_bytes: int = 1024 * 1024 * 1024
    # The child's JSON answer: the parent reads no more than this before giving up.
    answer_bytes: int = 32 * 1024 * 1024
    lane: Lane = "parse"

    def __post_init__(self) -> None:
        if self.lane == "short" and self.cpu_seconds > SHORT_CPU_SECONDS:
            raise ValueError(
                f"a short job may use at most {SHORT_CPU_SECONDS} s of CPU, not "
                f"{self.cpu_seconds}: give it the parse lane"
            )
