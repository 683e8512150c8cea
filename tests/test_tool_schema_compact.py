"""The schema the model reads: pydantic's noise left out, every argument's meaning kept."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from agentd.tools.base import InvalidArguments, Tool, ToolResult
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
    label: str = Field(default="", max_length=200, description="a few words")
    folder: str = Field(default="INBOX", max_length=200)
    days: int = Field(default=7, ge=1, le=60)
    network: bool = False
    enabled: bool = True
    code: str = Field(min_length=2, max_length=3, description="a country code")


def test_titles_docstring_null_variants_string_bounds_and_implied_defaults_go() -> None:
    raw = Args.model_json_schema()
    schema = for_model(raw)
    assert "title" not in schema and "description" not in schema
    props = schema["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for"}
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
    assert schema["required"] == ["query", "code"]
    # Defaults that leaving the argument out already means go; the others say something.
    assert props["label"] == {"type": "string", "description": "a few words"}
    assert props["folder"] == {"type": "string", "default": "INBOX"}
    assert props["network"] == {"type": "boolean"}
    assert props["enabled"] == {"type": "boolean", "default": True}
    assert props["days"] == {"type": "integer", "default": 7, "minimum": 1, "maximum": 60}
    # Bounds an argument can meet say something and stay.
    assert props["code"] == {
        "type": "string",
        "minLength": 2,
        "maxLength": 3,
        "description": "a country code",
    }
    assert raw["properties"]["limit"]["anyOf"]  # the input is not changed
    assert raw["properties"]["label"]["maxLength"] == 200


async def _run(args: Args) -> ToolResult:
    return ToolResult(content=args.model_dump_json())


def test_a_tool_offers_the_compact_schema_and_still_parses_omitted_arguments() -> None:
    tool = Tool.from_model(name="find", description="Find things.", args_model=Args, fn=_run)
    assert tool.llm_spec()["input_schema"] == for_model(Args.model_json_schema())
    parsed = tool.parse_args({"query": "tea", "code": "de"})
    assert parsed.limit is None and parsed.kind is None and parsed.note == "kept"
    assert parsed.label == "" and parsed.network is False and parsed.folder == "INBOX"


def test_a_string_bound_the_model_was_not_shown_is_still_enforced_and_named() -> None:
    tool = Tool.from_model(name="find", description="Find things.", args_model=Args, fn=_run)
    with pytest.raises(InvalidArguments) as refused:
        tool.parse_args({"query": "tea", "code": "de", "label": "x" * 201})
    assert "label" in str(refused.value) and "200" in str(refused.value)
    with pytest.raises(InvalidArguments) as empty:
        tool.parse_args({"query": "", "code": "de"})
    assert "query" in str(empty.value) and "1 character" in str(empty.value)


class Where(BaseModel):
    """Where to look."""

    place: str = Field(description="a place")


class Twice(BaseModel):
    name: str


class Nested(BaseModel):
    twice: Twice


class Watch(BaseModel):
    model_config = {"extra": "forbid"}

    where: Where = Field(description="the place to watch")
    first: Twice
    second: Twice
    nested: Nested | None = None


def test_a_definition_used_once_is_written_in_place_and_forbid_is_left_to_the_parser() -> None:
    schema = for_model(Watch.model_json_schema())
    assert "additionalProperties" not in schema
    # Used once: in place, the use's description, if any, in place of the docstring.
    assert schema["properties"]["where"] == {
        "description": "the place to watch",
        "properties": {"place": {"type": "string", "description": "a place"}},
        "required": ["place"],
        "type": "object",
    }
    # Used twice, or referring to another: left as definitions.
    assert schema["properties"]["first"] == {"$ref": "#/$defs/Twice"}
    assert schema["properties"]["second"] == {"$ref": "#/$defs/Twice"}
    assert sorted(schema["$defs"]) == ["Nested", "Twice"]
    assert schema["$defs"]["Nested"]["properties"]["twice"] == {"$ref": "#/$defs/Twice"}
    tool = Tool.from_model(name="watch", description="Watch.", args_model=Watch, fn=_run)
    with pytest.raises(InvalidArguments) as extra:
        tool.parse_args(
            {"where": {"place": "x"}, "first": {"name": "a"}, "second": {"name": "b"}, "colour": 1}
        )
    assert "colour" in str(extra.value)
