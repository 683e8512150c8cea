"""The memory tools the model can call: `remember` and `search_memory` (R-LTM-2, R-LTM-3).

Both are bound to the calling user through ToolContext: a user's tools see only their memories.
Whose words a memory is follows the turn: `remember` in a turn that has read outside content
stores `origin="outside"`, and `search_memory` taints a turn only when it finds such a memory
(the owner's and the model's own words are not outside content).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from agentd.config import MemoryConfig
from agentd.db.runner import Runner
from agentd.memory.facts import ExtractedFact, ExtractedFacts, remember_facts
from agentd.memory.search import day_in, format_recall, search_memories
from agentd.memory.store import taints
from agentd.retrieval.bits import BitCache
from agentd.retrieval.embedders import Embedder
from agentd.retrieval.fusion import fusion_from_config
from agentd.tools import Tool, ToolContext, ToolResult, Toolset, mark_untrusted
from agentd.tools.policy import asks_outside_private


class SearchArgs(BaseModel):
    query: str = Field(min_length=1, max_length=500, description="What to look for.")
    k: int = Field(default=5, ge=1, le=20, description="How many memories to return.")


GROUP_REFUSAL = (
    "Memories are private: they are not searched in group chats, where every member would read "
    "the answer. Tell the user to ask in a private chat."
)


def memory_tools(
    db: Runner,
    embedder: Embedder,
    config: MemoryConfig,
    bits: BitCache | None = None,
    zone: str = "UTC",
) -> list[Tool]:
    fusion = fusion_from_config(config)
    memory = Toolset()

    # It leaves words behind for later turns: egress (asks in a tainted turn). A user's
    # memories are private: written from a group, where others' words are in view, it asks.
    @memory.tool(
        risk="low",
        egress=True,
        assess=asks_outside_private("remember writes to the user's private memories"),
        description="Store a durable fact, preference or task about the user for later "
        "conversations. Reuse the same key when a fact changes, so it replaces the old one.",
    )
    async def remember(ctx: ToolContext, args: ExtractedFact) -> str:
        changes = await remember_facts(
            db,
            embedder,
            ctx.user_id,
            ExtractedFacts(facts=[args]),
            source=f"tool:{ctx.instance_id}",
            chat_id=ctx.chat_id,
            # What the model notes after reading a page or a mail may be that content's words.
            origin="outside" if ctx.tainted_by else "model",
            now=ctx.now(),
        )
        return f"Remembered ({changes[0].action}): {args.content}"

    # Its result taints only when a hit came from outside content (ToolResult.outside).
    @memory.tool(
        risk="low",
        description="Search the user's long-term memory (summaries of earlier "
        "conversations, facts, notes) for something specific.",
    )
    async def search_memory(ctx: ToolContext, args: SearchArgs) -> ToolResult:
        if not ctx.private:  # a group: the answer would show private memories to everyone
            return ToolResult(content=GROUP_REFUSAL)
        hits = await search_memories(
            db,
            embedder,
            ctx.user_id,
            args.query,
            k=args.k,
            fusion=fusion,
            bits=bits,
            today=day_in(ctx.now(), zone),
        )
        found = format_recall(hits, budget_chars=4000, zone=zone)
        return ToolResult(
            content=mark_untrusted(found or "No matching memories.", "memory"),
            outside=taints([h.memory for h in hits]),
        )

    return memory.tools()
