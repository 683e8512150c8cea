"""The memory capability: long-term memory tools, summaries, and the embedder's doctor checks.

The embedder itself is shared (documents and chat documents use it too): the daemon builds it
once, with the secret this capability names.
"""

from __future__ import annotations

from agentd.config import Config
from agentd.tools.capability import Check, Checks, Context, Contribution, Probe, Simple


def _secrets(config: Config) -> list[str]:
    return [config.memory.http_api_key_env] if config.memory.embedder == "http" else []


async def _build(ctx: Context) -> Contribution:
    from agentd.memory import chat_view
    from agentd.memory.command import FORGET_PREFIX, MemoryCommand, forget_by_button
    from agentd.memory.summarise import SummaryDeps, make_summary_workflow
    from agentd.memory.tools import memory_tools

    embedder = ctx.shared["embedder"]
    tools = memory_tools(
        ctx.db,
        embedder,
        ctx.config.memory,
        ctx.shared["memory_bits"],
        zone=ctx.config.agent.timezone,
    )
    summary = SummaryDeps(
        config=ctx.config, db=ctx.db, llm=ctx.llm, embedder=embedder, clock=ctx.clock
    )
    memory = MemoryCommand(ctx.db, embedder, ctx.clock, ctx.engine.prepare_start)
    return Contribution(
        tools=tools,
        workflows=[make_summary_workflow(summary)],
        commands=[memory.command()],
        callbacks={
            FORGET_PREFIX.rstrip(":"): forget_by_button,
            chat_view.PREFIX: memory.button,
        },
        awaits=[memory.edit_text],
        about="remember what you tell me, and recall it later",
    )


def _doctor(config: Config, probe: Probe) -> list[Check]:
    """Which embedder is active, whether it loads, and whether stored vectors are of it."""
    from agentd.retrieval.embedders import E5SmallEmbedder, EmbedderError, build_embedder

    results = Checks()
    try:
        embedder = build_embedder(config.memory, probe.secrets)
        if isinstance(embedder, E5SmallEmbedder):
            embedder.load_sync()
    except EmbedderError as exc:
        results.add("embedder", False, str(exc))
        return results
    name = f"{config.memory.embedder}: {embedder.model_id}/{embedder.dim}"
    if isinstance(embedder, E5SmallEmbedder):
        name += f" on {embedder.engine}"
    if config.memory.embedder == "hashing":
        results.add(
            "embedder",
            True,
            f"{name} — its vectors carry no meaning, so recall is keyword "
            "search only; set memory.embedder = 'e5-small' (the default)",
            warn=True,
        )
    else:
        results.add("embedder", True, name)
    _spaces(probe, embedder.model_id, embedder.dim, results)
    return results


def _spaces(probe: Probe, model_id: str, dim: int, results: Checks) -> None:
    """Warn when memories lack a vector of the active embedder."""
    from agentd.memory.store import vector_status

    memories = probe.read(lambda conn: vector_status(conn, model_id, dim))
    if memories is None:
        return  # no database yet, or the database check already says what is wrong
    stale = memories.total - memories.current
    results.add(
        "memory vectors",
        True,
        f"{stale} of {memories.total} memories lack a {model_id} vector: run "
        "`agentd memory reindex`"
        if stale
        else f"{memories.total} memories, all current",
        warn=bool(stale),
    )


def capability() -> Simple:
    return Simple("memory", build=_build, secrets=_secrets, doctor=_doctor)
