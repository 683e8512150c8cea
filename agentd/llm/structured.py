"""Structured outputs (R-LLM-5): the model must call one tool whose input is a pydantic model."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from agentd.llm.types import LLMError, LLMRequest, LLMResponse, ToolSpec, Usage

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger("agentd.llm")


class StructuredOutputError(Exception):
    """The model's answer did not fit the schema (retry the call, then handle it).

    `spent`: the last answer, carrying the tokens of every attempt (an LLMError raised after an
    answer that did not fit carries them in its `spent` too): what the call cost, for the
    caller's figures. `stopped`: the caller's `ask_again` said no before the attempts ran
    out."""

    def __init__(self, message: str, spent: LLMResponse, *, stopped: bool = False) -> None:
        super().__init__(message)
        self.spent = spent
        self.stopped = stopped


# Whether to ask again after an answer that did not fit (a budget that answer spent, say: it
# is in the ledger already when the model asked is `Billed`).
AskAgain = Callable[[], Awaitable[bool]]


class Asks(Protocol):
    """What a structured call asks: an LLM, or one whose every answer is billed as it arrives
    (llm/billing.py `Billed`), so an answer that did not fit is counted before the next."""

    async def complete(self, req: LLMRequest) -> LLMResponse: ...


@functools.cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    # A model class's schema never changes; generating it is most of a summary's request CPU.
    return model.model_json_schema()


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(**{k: getattr(a, k) + getattr(b, k) for k in Usage.model_fields})


async def complete_structured(
    llm: Asks,
    req: LLMRequest,
    model: type[M],
    *,
    name: str,
    description: str,
    attempts: int = 2,
    ask_again: AskAgain | None = None,
) -> tuple[M, LLMResponse]:
    """Ask for `model` through a forced tool call, validate it, and ask again if it is invalid
    (and `ask_again`, when given, allows it: a budget the first answer spent, say).

    The response returned carries the tokens of every attempt; so does the error's `spent`
    when no attempt fit, or when the model failed after one did not. Each answer's row is the
    ledger's as it arrives when `llm` is `Billed` (every caller in the daemon).
    """
    spec = ToolSpec(name=name, description=description, input_schema=_schema(model))
    forced = req.model_copy(update={"tools": [spec], "tool_choice": name})
    spent = Usage()
    guessed = False  # some answer's count was estimated (a server that sent none)
    response: LLMResponse | None = None
    for attempt in range(1, attempts + 1):
        try:
            answer = await llm.complete(forced)
        except LLMError as exc:
            if response is not None:  # the answer that did not fit was paid for all the same
                exc.spent = response
            raise
        spent, guessed = _add(spent, answer.usage), guessed or answer.estimated
        response = answer.model_copy(update={"usage": spent, "estimated": guessed})
        use = next((u for u in response.tool_uses if u.name == name), None)
        if use is None:
            error = f"the model did not call {name} (stop: {response.stop_reason})"
        else:
            try:
                result = model.model_validate(use.input)
            except ValidationError as exc:
                error = f"{name} input is invalid: {exc.error_count()} errors"
            else:
                return result, response
        log.info(
            "structured answer rejected", extra={"tool": name, "attempt": attempt, "error": error}
        )
        if attempt < attempts and ask_again is not None and not await ask_again():
            raise StructuredOutputError(f"{error}; not asked again", response, stopped=True)
    assert response is not None  # attempts >= 1
    raise StructuredOutputError(error, response)
