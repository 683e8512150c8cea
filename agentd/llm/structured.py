"""Structured outputs (R-LLM-5): the model must call one tool whose input is a pydantic model."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from agentd.llm import LLM
from agentd.llm.types import LLMRequest, LLMResponse, ToolSpec

M = TypeVar("M", bound=BaseModel)


class StructuredOutputError(Exception):
    """The model's answer did not fit the schema (retry the call, then handle it)."""


async def complete_structured(
    llm: LLM, req: LLMRequest, model: type[M], *, name: str, description: str
) -> tuple[M, LLMResponse]:
    """Ask for `model` through a forced tool call and validate what comes back."""
    spec = ToolSpec(name=name, description=description, input_schema=model.model_json_schema())
    response = await llm.complete(req.model_copy(update={"tools": [spec], "tool_choice": name}))
    use = next((u for u in response.tool_uses if u.name == name), None)
    if use is None:
        raise StructuredOutputError(f"the model did not call {name} (stop: {response.stop_reason})")
    try:
        return model.model_validate(use.input), response
    except ValidationError as exc:
        raise StructuredOutputError(f"{name} input is invalid: {exc.error_count()} errors") from exc
