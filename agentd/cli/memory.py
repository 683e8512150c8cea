"""`agentd memory`: see, search and forget what agentd remembers (R-LTM-2, R-LTM-4)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from agentd.cli.common import (
    EXIT_USAGE,
    ConfigOption,
    JsonOption,
    ModeOption,
    SearchMode,
    config_or_exit,
    database,
    fail,
    iso,
    new_table,
    out,
    print_json,
    print_table,
    reindex_with_bar,
    transaction,
    with_embedder,
)

app = typer.Typer(help="Long-term memory: list, search, forget, reindex.", no_args_is_help=True)
UserOption = Annotated[int | None, typer.Option("--user", help="Only this Telegram user id.")]


def _memory_json(m) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {**m.model_dump(), "created_at": iso(m.created_at), "updated_at": iso(m.updated_at)}


@app.command("ls")
def ls(
    user: UserOption = None,
    kind: Annotated[str | None, typer.Option(help="summary, fact, preference, task, note")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1)] = 50,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """List memories, newest first."""
    from agentd.memory.store import list_memories

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        rows = list_memories(conn, user, kinds=[kind] if kind else None, limit=limit)
    if json:
        print_json([_memory_json(m) for m in rows])
        return
    table = new_table("id", "user", "kind", "key", "memory", "updated (UTC)")
    for m in rows:
        table.add_row(
            str(m.id), str(m.user_id), m.kind, m.slot or "", m.content[:80], iso(m.updated_at)
        )
    print_table(
        table, drop=("key", "user"), empty="No memories yet: they are saved as you talk to the bot."
    )


def _only_user(conn: Any) -> int:
    """The one user with memories, so a one-person install needs no --user."""
    found = [r[0] for r in conn.execute("SELECT DISTINCT user_id FROM memories LIMIT 5")]
    if not found:
        fail("there are no memories yet: they are saved as you talk to the bot")
    if len(found) > 1:
        fail(f"several users have memories ({', '.join(map(str, found))}…): pass --user ID", 2)
    return int(found[0])


@app.command("search")
def search(
    query: str,
    user: Annotated[
        int | None,
        typer.Option("--user", help="Whose memories (Telegram user id); needed with several."),
    ] = None,
    k: Annotated[int, typer.Option("-k", min=1, max=50)] = 5,
    mode: ModeOption = SearchMode.hybrid,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Search one user's memories the way a turn does."""
    from agentd.db.runner import ConnRunner
    from agentd.memory.search import search_memories
    from agentd.retrieval.fusion import fusion_from_config

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        user = user if user is not None else _only_user(conn)
        hits = with_embedder(
            cfg,
            lambda embedder: search_memories(
                ConnRunner(conn),
                embedder,
                user,
                query,
                k=k,
                mode=mode.value,
                fusion=fusion_from_config(cfg.memory),
            ),
        )
    if json:
        print_json([{**_memory_json(h.memory), "score": h.score} for h in hits])
        return
    table = new_table("id", "kind", "score", "memory")
    for h in hits:
        table.add_row(str(h.memory.id), h.memory.kind, f"{h.score:.4f}", h.memory.content[:100])
    print_table(table, empty="No memory matches.")


@app.command("forget")
def forget(
    memory_id: Annotated[int | None, typer.Argument(help="The memory to forget.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Forget everything of --user.")] = False,
    user: UserOption = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Forget one memory, or all of a user's: the row, its vector and its keyword index."""
    from agentd.memory.store import forget as forget_one
    from agentd.memory.store import forget_user

    if all_ == (memory_id is not None):
        fail("give a memory ID, or --all --user ID", EXIT_USAGE)
    if all_ and user is None:
        fail("--all needs --user ID (whose memories to forget)", EXIT_USAGE)
    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        if all_:
            count = forget_user(conn, user)  # type: ignore[arg-type]
        else:
            count = int(forget_one(conn, memory_id, user_id=user))  # type: ignore[arg-type]
    if json:
        print_json({"forgotten": count})
    elif count == 0:
        fail(f"no memory {memory_id}" + (f" of user {user}" if user else ""))
    else:
        out.print(f"Forgot {count} memor{'y' if count == 1 else 'ies'}.")


@app.command("reindex")
def reindex(
    force: Annotated[
        bool, typer.Option(help="Re-embed everything, not only stale vectors.")
    ] = False,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Re-embed memories with the configured embedder (after changing the model)."""
    from agentd.memory.store import reindex as run_reindex
    from agentd.memory.store import vector_status

    def pending(conn: Any, embedder: Any) -> int:
        status = vector_status(conn, embedder.model_id, embedder.dim)
        return status.total if force else status.total - status.current

    reindex_with_bar(
        config_or_exit(config),
        "re-embedding memories",
        pending,
        lambda db, embedder, advance: run_reindex(db, embedder, force=force, progress=advance),
        json=json,
    )
