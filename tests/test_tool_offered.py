"""Where a tool is offered: its `offered` read decides, per chat, whether the model is shown
its schema; the prompt built for each answer is kept for the next call; the system prompt says
what the offered tools' risks ask of the model."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from agentd.agent.deps import StableMemo
from agentd.agent.prompt import ALL_LOW_RISK, LOW_RISK_LINE, NO_TOOLS, ToolInfo, build_system
from agentd.agent.toolloop import current_prefix
from agentd.config import Config
from agentd.db import Database
from agentd.skills import store
from agentd.tools import OwnerOnly, ToolRegistry, Toolset, tool


@tool(risk="low")
async def everywhere() -> str:
    """Offered in every chat."""
    return "ok"


def _sent_here(conn: Any, chat_id: int) -> bool:
    query = "SELECT 1 FROM chat_documents WHERE chat_id = ? LIMIT 1"
    return conn.execute(query, (chat_id,)).fetchone() is not None


@tool(risk="medium", offered=_sent_here)
async def about_the_file() -> str:
    """Offered where a file was sent."""
    return "ok"


def _broken(conn: Any, chat_id: int) -> bool:
    raise RuntimeError("a plugin's bug")


@tool(risk="low", offered=_broken)
async def broken_read() -> str:
    """Its read fails."""
    return "ok"


def _in(chat_id: int, user_id: int = 7, kind: str = "private") -> Any:
    return SimpleNamespace(chat_id=chat_id, user_id=user_id, chat_kind=kind)


def _deps(db: Database) -> Any:
    registry = ToolRegistry([everywhere, about_the_file, broken_read])
    return SimpleNamespace(
        registry=registry,
        db=db,
        config=Config(),
        skill_listing=None,
        stable=StableMemo(),
    )


async def test_a_tool_is_offered_only_where_its_read_holds(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    deps = _deps(db)
    await db.write(
        lambda conn: conn.execute(
            "INSERT INTO chat_documents (id, chat_id, user_id, file_id, file_name, format, "
            "sha256, size, title, created_at) VALUES ('u1', 7, 7, 'f', 'a.md', 'markdown', "
            "'00', 1, 'A', 0)"
        )
    )
    with caplog.at_level(logging.WARNING, logger="agentd.agent"):
        here = await current_prefix(deps, _in(7))
        elsewhere = await current_prefix(deps, _in(8, 8))
    names = {t.name for t in here.request.tools}
    assert names == {"everywhere", "about_the_file", "broken_read"}
    assert {t.name for t in elsewhere.request.tools} == {"everywhere", "broken_read"}
    # The system prompt names the risks of what this chat is offered, nothing else.
    assert "about_the_file" in here.request.system[0].text
    assert "about_the_file" not in elsewhere.request.system[0].text
    assert elsewhere.chars < here.chars  # the history window counts what is sent
    # A read that fails offers its tool, and says so.
    assert any(getattr(r, "tool", "") == "broken_read" for r in caplog.records)
    # Both variants are kept: the next call in each chat builds nothing.
    assert await current_prefix(deps, _in(7)) is here
    assert await current_prefix(deps, _in(8, 8)) is elsewhere


async def test_a_tool_its_guard_refuses_here_is_not_offered(db: Database) -> None:
    """The owner's mail in a group, or in a family member's private chat, is refused on every
    call: it is not offered there either, its schema costing no tokens; the owner's own
    private chat has it. A call to it is still refused where it is not offered."""
    mail = Toolset(guard=OwnerOnly(owner_id=7, refusal="the owner's only"))

    @mail.tool(risk="medium")
    async def mail_read() -> str:
        """Read the owner's mail."""
        return "mail"

    deps = _deps(db)
    deps.registry = ToolRegistry([everywhere, *mail.tools()])

    async def offered(where: Any) -> set[str]:
        return {t.name for t in (await current_prefix(deps, where)).request.tools}

    assert await offered(_in(7)) == {"everywhere", "mail_read"}
    assert await offered(_in(-5, 7, "group")) == {"everywhere"}
    assert await offered(_in(9, 9)) == {"everywhere"}
    assert mail_read.guard is not None
    from agentd.tools import ToolContext

    there = ToolContext(chat_id=-5, user_id=7, instance_id="t", chat_kind="group")
    assert mail_read.guard(there) == "the owner's only"


def test_the_memo_rebuilds_when_a_tool_comes_or_goes() -> None:
    memo, built = StableMemo(), []

    def build(tag: str) -> Any:
        built.append(tag)
        return object()

    tools = [everywhere, about_the_file]
    first = memo.get(tools, lambda: build("a"), key="a")
    assert memo.get(tools, lambda: build("b"), key="b") is not first
    assert memo.get(list(tools), lambda: build("a"), key="a") is first
    assert memo.get([everywhere], lambda: build("a"), key="a") is not first
    assert built == ["a", "b", "a"]


def test_the_skill_tools_are_offered_while_a_skill_is_enabled(conn: Any) -> None:
    assert not store.any_enabled(conn, 7)
    conn.execute(
        "INSERT INTO skills (name, path, description, content_hash, status, source, "
        "confirmed_at) VALUES ('tidy', '/s/tidy', 'Tidy up.', 'h', 'changed', 'local', 0)"
    )
    assert not store.any_enabled(conn, 7)  # held back: nothing to load
    conn.execute("UPDATE skills SET status = 'enabled'")
    assert store.any_enabled(conn, 7) and store.any_enabled(conn, -100)  # in every chat


def test_the_system_prompt_gives_every_offered_tools_risk_once() -> None:
    def system(*risks: str) -> str:
        tools = [ToolInfo(name=f"t_{r}_{i}", description="d", risk=r) for i, r in enumerate(risks)]
        return build_system(persona="", name="agentd", tools=tools)[0].text

    assert NO_TOOLS in system()
    assert ALL_LOW_RISK in system("low", "low")
    mixed = system("low", "medium", "high")
    medium = next(line for line in mixed.splitlines() if line.startswith("Medium-risk"))
    high = next(line for line in mixed.splitlines() if line.startswith("High-risk"))
    assert "t_medium_1" in medium and "what you did" in medium and "t_high_2" in high
    assert "t_low_0" not in mixed and LOW_RISK_LINE in mixed  # named in the tool list alone
    assert not mixed.startswith("\n")  # an empty persona leaves no blank start
