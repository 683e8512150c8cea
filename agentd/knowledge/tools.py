"""The search_docs tool (R-DOC-3): top-k passages of the owner's documents, with citations.

The passages are untrusted data (anyone can write a web page the owner ingests), so they are
wrapped by `mark_untrusted`; the citation instruction stands outside the wrapper, where the
model may follow it. Each search is audited (`kind="retrieval"`): the query, k and the ids of
the chunks returned, never their text.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from agentd.access import owners
from agentd.config import Config
from agentd.db.runner import Runner
from agentd.knowledge.search import DocHit, DocScope, search_documents
from agentd.ledger import audit
from agentd.retrieval.embedders import Embedder
from agentd.retrieval.fusion import fusion_from_config
from agentd.tools import Tool, ToolContext, Toolset, mark_untrusted
from agentd.tools.citations import heading, source_list

CITE_INSTRUCTION = (
    "Answer from these passages and cite each one you use by its id in square brackets, as "
    "in [D12], right after the claim; the reply turns the id into a link or the file's title."
)


class SearchDocsArgs(BaseModel):
    query: str = Field(
        min_length=1, max_length=500, description="What to look for, in the user's words."
    )
    k: int | None = Field(
        default=None, ge=1, le=20, description="How many passages to return (default 5)."
    )


def format_hits(hits: Sequence[DocHit], budget_chars: int) -> str:
    """Numbered passages within a character budget (each gets a fair share of it)."""
    share = max(200, budget_chars // max(1, len(hits)))
    parts = []
    for hit in hits:
        title = hit.title or hit.source
        line = heading(f"D{hit.chunk_id}", f"{title} — {hit.section}" if hit.section else title)
        text = hit.text if len(hit.text) <= share else hit.text[: share - 1].rstrip() + "…"
        parts.append(f"{line}\nSource: {hit.source}\n\n{text}")
    return "\n\n".join(parts)


def hit_sources(hits: Sequence[DocHit]) -> str:
    """The passages' ids as agent/citations.py reads them back, after the untrusted block."""
    return source_list((f"D{h.chunk_id}", h.source) for h in hits)


GROUP_REFUSAL = (
    "The document library is not searched in group chats (docs.in_groups is off): everyone "
    "in the group would read it. Tell the user to ask in a private chat."
)


def doc_scope(config: Config, user_id: int, private: bool) -> DocScope | None:
    """Whose documents this user may search here (None: none, in a group)."""
    if not private:  # a group: the owner's library at most, and only if configured
        return DocScope(user_id=None, library=True) if config.docs.in_groups else None
    is_owner = user_id == owners.resolve(config.access).owner_id
    return DocScope(user_id=user_id, library=is_owner or config.docs.shared)


def docs_tools(db: Runner, embedder: Embedder, config: Config) -> list[Tool]:
    """search_docs, bound to the database, the memory embedder and `[docs]`/`[memory]`."""
    fusion = fusion_from_config(config.memory)
    docs = config.docs
    library = Toolset()

    # Documents are outside content: a turn that read them is tainted (tools/policy.py).
    @library.tool(
        risk="low",
        taints=True,
        description="Search the owner's ingested documents (files, web pages); returns the best "
        "passages with their title, source and section.",
    )
    async def search_docs(ctx: ToolContext, args: SearchDocsArgs) -> str:
        scope = doc_scope(config, ctx.user_id, ctx.private)
        if scope is None:
            return GROUP_REFUSAL
        k = args.k or docs.top_k
        hits = await search_documents(db, embedder, args.query, k=k, fusion=fusion, scope=scope)
        detail = {
            "tool": "search_docs",
            "query": ctx.redact(args.query),
            "k": k,
            "hits": [h.chunk_id for h in hits],
            "documents": sorted({h.doc_id for h in hits}),
        }
        key = f"retrieval:{ctx.instance_id}:{ctx.tool_use_id}" if ctx.tool_use_id else None
        await db.write(
            lambda c: audit.record(
                c,
                "retrieval",
                chat_id=ctx.chat_id,
                user_id=ctx.user_id,
                instance_id=ctx.instance_id,
                detail=detail,
                source_key=key,
                at=ctx.now(),
            )
        )
        if not hits:
            return "No passage of the ingested documents matches this query."
        body = format_hits(hits, docs.max_result_chars)
        untrusted = mark_untrusted(body, "documents")
        return f"{CITE_INSTRUCTION}\n\n{untrusted}\n\n{hit_sources(hits)}"

    return library.tools()
