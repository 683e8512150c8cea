"""A task asks the [limits] daily budgets before each model call in a journaled step
(`limits#n`); a task journaled by older code, whose calls came unasked, replays them unasked.
End to end, a spent budget stops a task: tests/test_e2e_tasks.py."""

from __future__ import annotations

from typing import Any

from agentd.tasks.workflow import refused_call


class JournalStep:
    """A step whose journal holds `next_name` next; do() answers `verdict`."""

    def __init__(self, next_name: str | None, verdict: str = "daily_tokens") -> None:
        self.next_name, self.verdict = next_name, verdict
        self.asked: list[str] = []

    def journaled_next(self) -> str | None:
        return self.next_name

    async def do(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> str:
        self.asked.append(name)
        return self.verdict


async def test_each_call_is_asked_for_in_its_own_step() -> None:
    fresh = JournalStep(None)
    assert await refused_call(fresh, None, None, 3) == "daily_tokens"  # type: ignore[arg-type]
    assert fresh.asked == ["limits#3"]
    replayed = JournalStep("limits#3", verdict="")
    assert await refused_call(replayed, None, None, 3) == ""  # type: ignore[arg-type]
    assert replayed.asked == ["limits#3"]


async def test_a_call_journaled_before_the_check_existed_replays_unasked() -> None:
    older = JournalStep("llm#2")
    assert await refused_call(older, None, None, 2) == ""  # type: ignore[arg-type]
    assert older.asked == []
