"""Every paid model call in the ledger as it ends (R-LLM-4): its answer's row, and the rows of
its attempts cut short (a stream broken partway, a call stopped, an answer lost to a read
timeout or a closed connection), each call's in a commit of its own before its answer is used,
so a process killed a moment later has it.

A turn's and a task's calls write their rows with `bill` (agent/toolloop.py); a structured
call asks through `Billed`, so an answer that did not fit is counted as it arrives, not when
the whole call ends (llm/structured.py asks again after it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from agentd.llm.types import CutAttempt, LLMError, LLMRequest, LLMResponse

if TYPE_CHECKING:
    from agentd.db import Database
    from agentd.llm import LLM

# usage.record with where a call was spent bound (purpose, chat, instance, step, user); a row
# of it takes the tokens, model, attempt and estimated mark of one attempt.
Row = partial[None]


def answer_row(row: Row, response: LLMResponse) -> Row:
    return partial(
        row,
        tokens=response.usage,
        model=response.label,  # `local/qwen…`, so a local model is priced as its provider's
        attempt=response.attempt,
        estimated=response.estimated,
    )


def cut_rows(row: Row, cut: list[CutAttempt]) -> list[Row]:
    """Usage rows of the attempts cut short (a stream broken partway, a call stopped, an
    answer lost to a timeout or a closed connection): billed, so counted."""
    return [
        partial(row, tokens=c.usage, model=c.model, attempt=c.attempt, estimated=c.estimated)
        for c in cut
    ]


def _write_all(conn: Any, rows: list[Row]) -> None:
    for row in rows:
        row(conn)


async def bill(db: Database, rows: list[Row]) -> None:
    """A paid call's rows in a commit of their own, done before its answer is used.

    Not in the step's commit: a crash before that one would leave the paid answer uncounted,
    and the replay's call, paid again, counted alone. Written here, a replay writes a row for
    the call it makes (a second paid one), and the step's commit writes none. Unsynced: it
    survives the process dying at once, and a power loss from the step's synced commit on.
    Shielded: a stop arriving meanwhile does not drop the write, nor wait for it.
    """
    if rows:
        await asyncio.shield(db.write_unsynced(_write_all, rows))


async def bill_stopped(db: Database, rows: list[Row]) -> None:
    """The rows of a call a cancel stopped (/stop, an edit, interrupt mode, shutdown), from the
    cancel's own path: queued at once, so nothing drops them, and waited for, so the stop is
    over (engine.cancel waits for it) only once they are in the ledger. A second cancel ends
    the wait, not the write; a failed write is in the log (Database.write_behind)."""
    if not rows:
        return
    queued = db.write_behind(_write_all, rows)
    with contextlib.suppress(Exception):
        await asyncio.shield(queued)


async def complete_billed(
    db: Database,
    llm: LLM,
    req: LLMRequest,
    row: Row,
    cut: list[CutAttempt],
    on_text: Callable[[str], Awaitable[None]] | None = None,
) -> LLMResponse:
    """One model call whose attempts cut short are in the ledger whatever becomes of it. On an
    answer the caller writes them with the answer's row (`bill`)."""
    try:
        return await llm.complete(req, on_text=on_text, cut=cut)
    except LLMError:
        await bill(db, cut_rows(row, cut))
        raise
    except asyncio.CancelledError:
        # Stopped: the attempt the owner cut short, streamed or not, is billed all the same.
        await bill_stopped(db, cut_rows(row, cut))
        raise


@dataclass(frozen=True)
class Billed:
    """A model whose every call is billed as it ends: the answer's row and those of its
    attempts cut short, in a commit of their own before the answer is returned. What a
    structured call asks through (llm/structured.py `complete_structured`)."""

    llm: LLM
    db: Database
    row: Row

    async def complete(self, req: LLMRequest) -> LLMResponse:
        cut: list[CutAttempt] = []
        response = await complete_billed(self.db, self.llm, req, self.row, cut)
        await bill(self.db, [*cut_rows(self.row, cut), answer_row(self.row, response)])
        return response
