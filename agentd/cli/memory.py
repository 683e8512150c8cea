"""`agentd memory`: see, search, add, edit, forget, restore, import and export what agentd
remembers (R-LTM-2, R-LTM-4). Commands are thin over agentd/memory/manage.py, importer.py and
portable.py, which the chat's /memory command and the dashboard call too."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agentd.cli.common import (
    EXIT_USAGE,
    ConfigOption,
    JsonOption,
    ModeOption,
    SearchMode,
    clip,
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

app = typer.Typer(
    help="Long-term memory: list, search, add, edit, forget, history, restore, pin, import,"
    " export, reindex.",
    no_args_is_help=True,
)
UserOption = Annotated[
    int | None, typer.Option("--user", help="Only this user (an id `agentd users ls` lists).")
]


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
    table = new_table(
        "id", "user", "kind", "key", "memory", "origin", "from", "date", "updated (UTC)"
    )
    for m in rows:
        table.add_row(
            str(m.id) + (" *" if m.pinned else ""),
            str(m.user_id),
            m.kind,
            m.slot or "",
            clip(m.content, 80),
            m.origin,
            m.origin_ref or m.source,
            (iso(m.created_at) or "")[:10],
            iso(m.updated_at),
        )
    print_table(
        table,
        drop=("key", "user", "updated (UTC)", "from"),
        empty="No memories yet: they are saved as you talk to the bot.",
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
        typer.Option("--user", help="Whose memories (a user id); needed with several."),
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
        table.add_row(
            str(h.memory.id), h.memory.kind, f"{h.score:.4f}", clip(h.memory.content, 100)
        )
    print_table(table, empty="No memory matches.")


@app.command("forget")
def forget(
    memory_id: Annotated[int | None, typer.Argument(help="The memory to forget.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Forget everything of --user.")] = False,
    user: UserOption = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Forget one memory, or all of a user's (kept in history: `restore` brings it back)."""
    from agentd.memory.manage import MemoryNotFound, forget_all, forget_one

    if all_ == (memory_id is not None):
        fail("give a memory ID, or --all --user ID", EXIT_USAGE)
    if all_ and user is None:
        fail("--all needs --user ID (whose memories to forget)", EXIT_USAGE)
    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        if all_:
            count = forget_all(conn, user)  # type: ignore[arg-type]
        else:
            try:
                forget_one(conn, memory_id, user_id=user)  # type: ignore[arg-type]
                count = 1
            except MemoryNotFound:
                count = 0
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
        "memories",
        pending,
        lambda db, embedder, advance: run_reindex(db, embedder, force=force, progress=advance),
        json=json,
    )


KindOption = Annotated[
    str, typer.Option("--kind", help="note, fact, preference or task (facts may have a --key).")
]


def _user_for_write(conn: Any, user: int | None, config: Any) -> int:
    """--user, else the configured owner (these are "your own words"), else the one user with
    memories."""
    from agentd.access import owners

    if user is not None:
        return user
    owner = owners.resolve(config.access).owner_id
    if owner is not None:
        return int(owner)
    found = [r[0] for r in conn.execute("SELECT DISTINCT user_id FROM memories LIMIT 5")]
    if len(found) == 1:
        return int(found[0])
    if len(found) > 1:
        fail(f"several users have memories ({', '.join(map(str, found))}…): pass --user ID", 2)
    fail(
        "no owner in the config ([access] owner_id) and no memories yet, so whose is this? "
        "pass --user ID (a user id `agentd users ls` lists)",
        EXIT_USAGE,
    )


def _manage(config: Any, work: Any, *, embed: bool = True) -> Any:
    """Run `work(db, embedder)` on a write connection; a missing memory or version exits 1."""
    from agentd.db.runner import ConnRunner
    from agentd.memory.store import MemoryStoreError

    with database(config, write=True) as conn:
        db = ConnRunner(conn)
        try:
            if embed:
                return with_embedder(config, lambda embedder: work(conn, db, embedder))
            import asyncio

            return asyncio.run(work(conn, db, None))
        except MemoryStoreError as exc:
            fail(str(exc))


def _show(memory: Any, verb: str, json: bool) -> None:
    if json:
        print_json(_memory_json(memory))
    else:
        out.print(f"{verb} memory {memory.id} ({memory.kind}, {memory.origin}): {memory.content}")


@app.command("add")
def add(
    text: Annotated[str, typer.Argument(help="The memory, in your words.")],
    kind: KindOption = "note",
    key: Annotated[
        str | None, typer.Option(help="A fact's key (home_city): replaces the fact with it.")
    ] = None,
    pin: Annotated[bool, typer.Option(help="Always put it in the prompt.")] = False,
    user: UserOption = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Add a memory in your own words."""
    from agentd.memory import manage

    if kind not in ("note", "fact", "preference", "task"):
        fail("--kind is one of note, fact, preference, task", EXIT_USAGE)

    cfg = config_or_exit(config)

    async def work(conn: Any, db: Any, embedder: Any) -> Any:
        who = _user_for_write(conn, user, cfg)
        return await manage.add(db, embedder, who, text, kind=kind, key=key, pinned=pin)

    memory, action = _manage(cfg, work)
    if pin and not memory.pinned:
        memory = _manage(
            config_or_exit(config),
            lambda conn, db, _: db.write(lambda c: manage.set_pinned(c, memory.id, True)),
            embed=False,
        )
    _show(memory, action.capitalize(), json)


@app.command("edit")
def edit(
    memory_id: Annotated[int, typer.Argument(help="The memory to rewrite.")],
    text: Annotated[str, typer.Argument(help="Its new text, in your words.")],
    user: UserOption = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Rewrite a memory (the old text stays in its history)."""
    from agentd.memory import manage

    memory = _manage(
        config_or_exit(config),
        lambda conn, db, embedder: manage.edit(db, embedder, memory_id, text, user_id=user),
    )
    _show(memory, "Edited", json)


@app.command("history")
def history(
    memory_id: Annotated[int, typer.Argument(help="The memory (also a forgotten one).")],
    user: UserOption = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Every version of a memory: who changed it, when, from what to what."""
    from agentd.memory import manage

    async def work(conn: Any, db: Any, _: Any) -> Any:
        return manage.history(conn, memory_id, user_id=user)

    versions = _manage(config_or_exit(config), work, embed=False)
    if json:
        print_json([{**v.model_dump(), "created_at": iso(v.created_at)} for v in versions])
        return
    table = new_table("version", "when (UTC)", "action", "by", "origin", "text")
    for v in versions:
        text = v.new_content if v.new_content is not None else f"(was: {v.old_content})"
        table.add_row(
            str(v.version), iso(v.created_at), v.action, v.actor, v.origin, clip(text, 80)
        )
    print_table(table, empty=f"Memory {memory_id} has no recorded changes (made before versions).")


@app.command("restore")
def restore(
    memory_id: Annotated[int, typer.Argument(help="The memory.")],
    version: Annotated[int, typer.Argument(help="The version to go back to (see history).")],
    user: UserOption = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Make a memory read as it did at one of its versions (a forgotten one comes back)."""
    from agentd.memory import manage

    memory = _manage(
        config_or_exit(config),
        lambda conn, db, embedder: manage.restore(db, embedder, memory_id, version, user_id=user),
    )
    _show(memory, "Restored", json)


@app.command("pin")
def pin(
    memory_id: Annotated[int, typer.Argument(help="The memory.")],
    off: Annotated[bool, typer.Option("--off", help="Unpin it.")] = False,
    user: UserOption = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Pin a memory so it is always in the prompt (or --off)."""
    from agentd.memory import manage

    memory = _manage(
        config_or_exit(config),
        lambda conn, db, _: db.write(
            lambda c: manage.set_pinned(c, memory_id, not off, user_id=user)
        ),
        embed=False,
    )
    _show(memory, "Unpinned" if off else "Pinned", json)


FormatOption = Annotated[str, typer.Option("--format", help="openclaw, hermes, markdown or json.")]
_FORMATS = ("openclaw", "hermes", "markdown", "json")


@app.command("import")
def import_(
    path: Annotated[Path, typer.Argument(help="A file, an OpenClaw workspace or a Hermes home.")],
    format_: FormatOption = "openclaw",
    user: UserOption = None,
    mine: Annotated[
        bool,
        typer.Option(
            "--mine",
            help="The file is yours: keep its own origins (outside stays outside), the rest as "
            "your words, and honour `pinned`. Without it everything is outside content.",
        ),
    ] = False,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Import memories (as outside content unless --mine; re-importing adds nothing)."""
    from agentd.memory.importer import import_items
    from agentd.memory.portable import read_peer

    if format_ not in _FORMATS:
        fail(f"--format is one of {', '.join(_FORMATS)}", EXIT_USAGE)
    if not path.exists():
        fail(f"{path} does not exist", EXIT_USAGE)
    try:
        items = read_peer(path, format_)  # type: ignore[arg-type]
    except (ValueError, UnicodeDecodeError) as exc:
        fail(f"cannot read {path}: {exc}")

    cfg = config_or_exit(config)

    async def work(conn: Any, db: Any, embedder: Any) -> Any:
        return await import_items(db, embedder, _user_for_write(conn, user, cfg), items, mine=mine)

    report = _manage(cfg, work)
    if json:
        print_json(report.model_dump())
    else:
        out.print(
            f"Imported {report.added} new, {report.merged} merged, {report.superseded} "
            f"superseding, {report.unchanged} already there"
            + (
                "."
                if mine
                else " (as outside content: recalling them asks before anything leaves; "
                "--mine if the file is your own words)."
            )
        )


@app.command("export")
def export(
    out_dir: Annotated[Path, typer.Argument(help="An empty or new directory.")],
    format_: FormatOption = "openclaw",
    user: UserOption = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Export memories as OpenClaw or Hermes memory files, Markdown or JSON."""
    from agentd.memory.portable import export_files, write_export
    from agentd.memory.store import list_memories

    if format_ not in _FORMATS:
        fail(f"--format is one of {', '.join(_FORMATS)}", EXIT_USAGE)
    cfg = config_or_exit(config)
    with database(cfg) as conn:
        who = user if user is not None else _only_user(conn)
        memories = list_memories(conn, who, limit=1_000_000)
    try:
        written = write_export(export_files(memories, format_), out_dir)  # type: ignore[arg-type]
    except FileExistsError as exc:
        fail(str(exc))
    if json:
        print_json({"files": [str(p) for p in written], "memories": len(memories)})
    else:
        out.print(f"Exported {len(memories)} memories to {len(written)} files in {out_dir}.")
