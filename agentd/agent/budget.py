"""The [limits] daily budgets, asked before each model call of a loop (a turn's, a task's).

A turn asks once before it takes anything in (turn.py, `rate-check`); the calls after the
first are asked one by one in `limits#n`, journaled, so a replay stops where the run did. A
loop that ran over hours (an approval waited for, a long tool) or beside other turns would
otherwise make every call it has left whatever the budgets say.
"""

from __future__ import annotations

from typing import Protocol

from agentd.access import ratelimit
from agentd.agent.deps import TurnDeps
from agentd.durable import Step


class ForUser(Protocol):
    """Whom the calls serve: a turn's or a task's input."""

    user_id: int


async def over_limits(deps: TurnDeps, where: ForUser) -> ratelimit.TokenLimit:
    """The [limits] budget the next model call for this user would go over ("": none)."""
    return await deps.db.read_inline(
        ratelimit.over_tokens, deps.config.limits, user_id=where.user_id, now=deps.clock.now()
    )


async def refused_call(step: Step, deps: TurnDeps, where: ForUser, n: int) -> ratelimit.TokenLimit:
    """Which daily budget stops model call `n` ("": it may go ahead), asked in a journaled
    step. An instance journaled by older code, whose call came without this step, replays that
    call unasked: its journal is never stranded."""
    if step.journaled_next() == f"llm#{n}":
        return ""
    return await step.do(f"limits#{n}", over_limits, deps, where, delivery="idempotent")


def stopped_note(limit: ratelimit.TokenLimit, deps: TurnDeps, n: int) -> str:
    """What the user reads when call `n` was not made."""
    words = ratelimit.spent_words(limit, deps.config.limits)
    return f"(Stopped before model call {n}: {words}. Ask again after 00:00 UTC.)"
