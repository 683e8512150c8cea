"""Tool declaration, schemas, the registry and plugins (R-TOOL-1, R-TOOL-6)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from agentd.config import Config, ToolsConfig
from agentd.tools import (
    DuplicateToolError,
    InvalidArguments,
    Tool,
    ToolContext,
    ToolDeclarationError,
    ToolRegistry,
    execute,
    tool,
)
from agentd.tools.builtin import current_time
from agentd.tools.plugins import load_plugins

CTX = ToolContext(
    chat_id=1, chat_kind="private", user_id=2, instance_id="test", timezone="Europe/Berlin"
)


class SearchArgs(BaseModel):
    query: str = Field(description="What to look for")
    limit: int = Field(default=5, ge=1, le=50)


@tool(risk="medium")
async def search(ctx: ToolContext, args: SearchArgs) -> str:
    """Search the owner's notes."""
    return f"{args.query}:{args.limit}"


@tool(name="greet-person")
async def greet(
    name: Annotated[str, Field(description="Who to greet")], polite: bool = True
) -> str:
    """Greet someone.

    Longer explanation that the model also reads.
    """
    return ("Good day, " if polite else "Hi ") + name


def test_schema_from_a_pydantic_model() -> None:
    spec = search.llm_spec()
    assert spec["name"] == "search"
    assert spec["description"] == "Search the owner's notes."
    schema = spec["input_schema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"]["description"] == "What to look for"
    assert schema["properties"]["limit"]["maximum"] == 50
    assert search.risk == "medium" and search.args_model is SearchArgs


def test_schema_from_plain_typed_parameters_and_docstring() -> None:
    spec = greet.llm_spec()
    assert spec["name"] == "greet-person"
    assert spec["description"].startswith("Greet someone.\n\nLonger explanation")
    schema = spec["input_schema"]
    assert schema["required"] == ["name"]
    assert schema["properties"]["name"]["description"] == "Who to greet"
    assert schema["properties"]["polite"]["default"] is True
    # Unknown arguments are rejected, so a typo in the model's call is reported back (by the
    # parser: the schema the model reads need not say it).
    assert "additionalProperties" not in schema
    with pytest.raises(InvalidArguments, match="nmae"):
        greet.parse_args({"nmae": "Ann"})


async def test_bare_decorator_and_no_arguments() -> None:
    @tool
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    assert ping.name == "ping" and ping.risk == "low" and ping.timeout == 30.0
    assert ping.llm_spec()["input_schema"]["properties"] == {}
    assert (await execute(ping, CTX, {})).content == "pong"


def test_llm_spec_is_a_copy() -> None:
    spec = search.llm_spec()
    spec["input_schema"]["properties"].clear()
    assert search.llm_spec()["input_schema"]["properties"]


async def test_plain_parameters_are_passed_as_keywords() -> None:
    outcome = await execute(greet, CTX, {"name": "Ada", "polite": False})
    assert outcome.ok and outcome.content == "Hi Ada"


def _declare_sync() -> None:
    @tool()
    def sync_tool(x: int) -> str:
        """Sync."""
        return str(x)


def _declare_no_doc() -> None:
    @tool()
    async def undocumented(x: int) -> str:
        return str(x)


def _declare_untyped() -> None:
    @tool()
    async def untyped(x) -> str:  # type: ignore[no-untyped-def]
        """No hint."""
        return str(x)


def _declare_bad_name() -> None:
    @tool(name="has space")
    async def spaced(x: int) -> str:
        """Bad name."""
        return str(x)


def _declare_ctx_not_first() -> None:
    @tool()
    async def late_ctx(x: int, ctx: ToolContext) -> str:
        """Context second."""
        return str(x)


def _declare_varargs() -> None:
    @tool()
    async def star(*values: int) -> str:
        """Varargs."""
        return str(values)


class Opaque:
    """Not a type pydantic can describe."""


def _declare_unschemable() -> None:
    @tool()
    async def opaque(thing: Opaque) -> str:
        """Arbitrary class."""
        return str(thing)


def _declare_model_and_more() -> None:
    @tool()
    async def mixed(args: SearchArgs, extra: int) -> str:
        """Model plus a field."""
        return ""


def _declare_bad_risk() -> None:
    @tool(risk="extreme")  # type: ignore[arg-type]
    async def risky(x: int) -> str:
        """Risky."""
        return ""


def _declare_bad_timeout() -> None:
    @tool(timeout=0)
    async def instant(x: int) -> str:
        """Instant."""
        return ""


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (_declare_sync, "must be an async def"),
        (_declare_no_doc, "needs a docstring"),
        (_declare_untyped, "needs a type hint"),
        (_declare_bad_name, "must be 1-64 letters"),
        (_declare_ctx_not_first, "must be the first parameter"),
        (_declare_varargs, "*args and **kwargs"),
        (_declare_unschemable, "unusable argument types"),
        (_declare_model_and_more, "only argument"),
        (_declare_bad_risk, "risk must be one of"),
        (_declare_bad_timeout, "timeout must be positive"),
    ],
)
def test_bad_declaration_fails_when_declared(declare: object, message: str) -> None:
    with pytest.raises(ToolDeclarationError, match=message.replace("*", r"\*")):
        declare()  # type: ignore[operator]


def test_registry_rejects_duplicates_and_lists_specs() -> None:
    registry = ToolRegistry([search, greet])
    assert registry.names() == ["search", "greet-person"]
    assert registry.get("search") is search and registry.get("nope") is None
    assert "search" in registry and len(registry) == 2
    assert [s["name"] for s in registry.llm_specs()] == ["search", "greet-person"]
    assert registry.has_risk("medium") and not registry.has_risk("high")
    with pytest.raises(DuplicateToolError, match="clashes"):
        registry.register(search)


def test_unknown_tool_outcome_lists_the_tools() -> None:
    outcome = ToolRegistry([search]).unknown("serch")
    assert not outcome.ok and outcome.error_kind == "unknown_tool"
    assert "serch" in outcome.content and "search" in outcome.content


def test_build_has_builtins_by_default() -> None:
    registry, problems = ToolRegistry.build(ToolsConfig())
    assert problems == []
    assert registry.names() == ["current_time", "fetch_url"]
    assert registry.get("current_time").risk == "low"  # type: ignore[union-attr]
    assert registry.get("fetch_url").risk == "low"  # type: ignore[union-attr]


def test_build_applies_risk_overrides_and_disabled_from_config() -> None:
    config = Config.model_validate(
        {
            "tools": {
                "risk": {"fetch_url": "high", "search": "low", "typo_tool": "high"},
                "disabled": ["current_time", "ghost"],
            }
        }
    ).tools
    registry, problems = ToolRegistry.build(config, extra=[search])
    assert registry.names() == ["fetch_url", "search"]
    assert registry.get("fetch_url").risk == "high"  # type: ignore[union-attr]
    assert registry.get("search").risk == "low"  # type: ignore[union-attr]
    assert search.risk == "medium"  # the declared tool itself is untouched
    messages = [str(p) for p in problems]
    assert any("typo_tool" in m for m in messages)
    assert any("ghost" in m for m in messages)


def test_build_reports_a_clash_instead_of_raising() -> None:
    clone = Tool.from_model(
        name="current_time",
        description="Another clock.",
        args_model=SearchArgs,
        fn=search.fn,
        source="plugin:x",
    )
    registry, problems = ToolRegistry.build(ToolsConfig(), extra=[clone])
    assert registry.get("current_time") is current_time
    assert len(problems) == 1 and "clashes" in problems[0].message


async def test_plugins_load_and_broken_ones_are_reported() -> None:
    config = ToolsConfig(
        plugins=[
            "tests.plugins.sample_plugin",
            "tests.plugins.broken_plugin",
            "tests.plugins.does_not_exist",
        ],
        risk={"shout": "high"},
    )
    registry, problems = ToolRegistry.build(config, builtins=[])
    assert registry.names() == ["shout"]
    shout = registry.get("shout")
    assert shout is not None and shout.risk == "high" and shout.source.startswith("plugin:")
    outcome = await execute(shout, CTX, {"text": "hi", "times": 2})
    assert outcome.ok and outcome.content == "HI! HI!"

    by_source = {p.source: p.message for p in problems}
    assert "must be an async def" in by_source["plugin:tests.plugins.broken_plugin"]
    assert "not found" in by_source["plugin:tests.plugins.does_not_exist"]
    assert len(problems) == 2


def test_plugin_that_raises_on_import_is_reported() -> None:
    def explode(name: str) -> object:
        raise RuntimeError("database password is wrong\nsecond line with details")

    registry, problems = ToolRegistry.build(
        ToolsConfig(plugins=["boom"]), builtins=[], import_module=explode
    )
    assert len(registry) == 0
    assert problems[0].source == "plugin:boom"
    assert "RuntimeError: database password is wrong" in problems[0].message
    assert "second line" not in problems[0].message


async def test_current_time_uses_the_owner_time_zone_and_clock() -> None:
    ctx = ToolContext(
        chat_id=1,
        chat_kind="private",
        user_id=1,
        instance_id="t",
        timezone="Asia/Tokyo",
        now=lambda: 0.0,
    )
    outcome = await execute(current_time, ctx, {})
    assert outcome.ok
    assert outcome.content == "1970-01-01T09:00:00+09:00 (Asia/Tokyo, Thursday)"
    other = await execute(current_time, ctx, {"timezone": "UTC"})
    assert other.content.startswith("1970-01-01T00:00:00+00:00")
    bad = await execute(current_time, ctx, {"timezone": "Mars/Olympus"})
    assert not bad.ok and bad.error_kind == "tool_error" and "Mars/Olympus" in bad.content
    folder = await execute(current_time, ctx, {"timezone": "America"})  # a folder, no zone
    assert not folder.ok and folder.error_kind == "tool_error" and "America" in folder.content


def test_call_risk_follows_the_tool_its_assessment_and_the_turns_taint() -> None:
    from agentd.tools import Assessment, CallState, call_risk

    async def noop(ctx: ToolContext, text: str) -> str:
        """Does nothing."""
        return text

    plain = tool(risk="low")(noop)
    assert call_risk(plain, None, CallState()) == Assessment(risk="low")
    egress = dataclasses.replace(plain, egress=True)
    assert call_risk(egress, None, CallState()).risk == "low"
    tainted = call_risk(egress, None, CallState(tainted_by=("https://example.org/page",)))
    assert tainted.risk == "high" and "https://example.org/page" in tainted.reason
    assert call_risk(plain, None, CallState(tainted_by=("x",))).risk == "low"  # no egress

    def allowlist(args: object, state: CallState) -> Assessment | None:
        return Assessment(risk="low", reason="read-only") if args == "df" else None

    judged = dataclasses.replace(plain, risk="high", assess=allowlist, egress=True)
    assert call_risk(judged, "df", CallState()) == Assessment(risk="low", reason="read-only")
    assert call_risk(judged, "rm", CallState()).risk == "high"
    assert call_risk(judged, "df", CallState(tainted_by=("mail",))).risk == "high"


def test_a_plugin_tool_without_a_declared_risk_is_high(tmp_path: Path) -> None:
    (tmp_path / "undeclared_risk.py").write_text(
        "from agentd.tools import tool\n\n"
        "@tool\nasync def mystery(x: int) -> str:\n    '''Does something.'''\n    return ''\n\n"
        "@tool(risk='low')\nasync def harmless(x: int) -> str:\n    '''Says so.'''\n    return ''\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        tools, problems = load_plugins(["undeclared_risk"])
    finally:
        sys.path.remove(str(tmp_path))
    assert problems == []
    assert {t.name: t.risk for t in tools} == {"mystery": "high", "harmless": "low"}
