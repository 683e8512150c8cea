"""The schema the model reads: pydantic's noise left out, every argument's meaning kept."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agentd.tools.base import Tool, ToolResult
from agentd.tools.compact_schema import for_model


class Inner(BaseModel):
    title: str = Field(description="a property that is itself called title")


class Args(BaseModel):
    """Written for the code's readers, not the model."""

    query: str = Field(min_length=1, description="what to look for")
    limit: int | None = Field(default=None, ge=1, description="at most this many")
    kind: Literal["a", "b"] | None = None
    either: int | str | None = None
    note: str | None = "kept"
    inner: Inner | None = None
    items: list[Inner] = []


def test_titles_docstring_and_null_variants_go_and_the_rest_stays() -> None:
    raw = Args.model_json_schema()
    schema = for_model(raw)
    assert "title" not in schema and "description" not in schema
    props = schema["properties"]
    assert props["query"] == {"type": "string", "minLength": 1, "description": "what to look for"}
    assert props["limit"] == {"type": "integer", "minimum": 1, "description": "at most this many"}
    assert props["kind"] == {"type": "string", "enum": ["a", "b"]}
    # More than one non-null variant, or a default that is not null: as pydantic wrote them.
    assert props["either"]["anyOf"] == [{"type": "integer"}, {"type": "string"}, {"type": "null"}]
    assert props["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert props["note"]["default"] == "kept"
    assert props["inner"] == {"$ref": "#/$defs/Inner"}
    # A property named "title" is an argument, not pydantic's label: it stays.
    assert schema["$defs"]["Inner"]["properties"] == {
        "title": {"type": "string", "description": "a property that is itself called title"}
    }
    assert schema["required"] == ["query"]
    assert raw["properties"]["limit"]["anyOf"]  # the input is not changed


async def _run(args: Args) -> ToolResult:
    return ToolResult(content=args.model_dump_json())


def test_a_tool_offers_the_compact_schema_and_still_parses_omitted_arguments() -> None:
    tool = Tool.from_model(name="find", description="Find things.", args_model=Args, fn=_run)
    assert tool.llm_spec()["input_schema"] == for_model(Args.model_json_schema())
    parsed = tool.parse_args({"query": "tea"})
    assert parsed.limit is None and parsed.kind is None and parsed.note == "kept"
