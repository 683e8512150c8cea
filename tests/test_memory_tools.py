"""The model's memory tools and whose words they carry: `search_memory` taints a turn only when
it finds a memory from outside content; `remember` in a tainted turn stores outside content."""

from __future__ import annotations

from typing import Any

from agentd.agent.approval_flow import Route
from agentd.agent.calls import note_result
from agentd.agent.taint import TurnTaint
from agentd.config import MemoryConfig
from agentd.db.runner import ConnRunner
from agentd.llm.types import ToolUseBlock
from agentd.memory import HashingEmbedder
from agentd.memory.manage import add
from agentd.memory.store import list_memories
from agentd.memory.tools import memory_tools
from agentd.tools import ToolContext, ToolOutcome, ToolResult, execute, tool


def _tools(conn: Any) -> dict[str, Any]:
    return {t.name: t for t in memory_tools(ConnRunner(conn), HashingEmbedder(), MemoryConfig())}


async def _search(conn: Any, query: str) -> tuple[ToolOutcome, TurnTaint]:
    search = _tools(conn)["search_memory"]
    assert not search.taints  # the result says so, when it does
    ctx = ToolContext(chat_id=7, chat_kind="private", user_id=7, instance_id="t")
    outcome = await execute(search, ctx, {"query": query, "k": 1})
    taint = TurnTaint()
    use = ToolUseBlock(id="toolu_1", name="search_memory", input={"query": query})
    note_result(taint, Route(name="search_memory", risk="low"), use, outcome)
    return outcome, taint


async def test_search_memory_taints_only_on_an_outside_hit(conn: Any) -> None:
    db, emb = ConnRunner(conn), HashingEmbedder()
    await add(db, emb, 7, "Imported: the dentist is Dr Ruiz", origin_ref="USER.md")
    await add(db, emb, 7, "The page said the recital moved to Friday", origin="outside")
    mine, clean = await _search(conn, "dentist Ruiz")
    assert mine.ok and "Dr Ruiz" in mine.content and not mine.outside
    assert clean.sources == []
    found, tainted = await _search(conn, "recital Friday")
    assert found.outside and tainted.sources == ["search_memory (recital Friday)"]
    group = await execute(
        _tools(conn)["search_memory"],
        ToolContext(chat_id=-5, chat_kind="group", user_id=7, instance_id="t"),
        {"query": "recital"},
    )
    assert not group.outside and "private" in group.content


async def test_remember_is_outside_content_in_a_tainted_turn(conn: Any) -> None:
    remember = _tools(conn)["remember"]
    fact = {"kind": "fact", "key": "diet", "content": "Vegetarian"}
    plain = ToolContext(chat_id=7, chat_kind="private", user_id=7, instance_id="a")
    assert (await execute(remember, plain, fact)).ok
    read = ToolContext(
        chat_id=7, chat_kind="private", user_id=7, instance_id="b", tainted_by=("fetch_url (x)",)
    )
    other = {"kind": "fact", "key": "gym", "content": "Goes to the gym on Mondays"}
    assert (await execute(remember, read, other)).ok
    origins = {m.slot: m.origin for m in list_memories(conn, 7)}
    assert origins == {"diet": "model", "gym": "outside"}


async def test_any_tool_result_may_say_it_is_outside_content() -> None:
    @tool(risk="low")
    async def lookup(ctx: ToolContext) -> ToolResult:
        """Answers from somewhere."""
        return ToolResult(content="from a page", outside=True)

    ctx = ToolContext(chat_id=1, chat_kind="private", user_id=1, instance_id="i")
    outcome = await execute(lookup, ctx, {})
    assert outcome.outside
    taint = TurnTaint()
    use = ToolUseBlock(id="toolu_1", name="lookup", input={})
    note_result(taint, Route(name="lookup", risk="low"), use, outcome)
    assert taint.sources == ["lookup"]
    failed = TurnTaint()  # a failure of a tool that does not taint says so by itself
    note_result(
        failed,
        Route(name="lookup", risk="low"),
        use,
        ToolOutcome(ok=False, content="no", error_kind="tool_error"),
    )
    assert failed.sources == []
