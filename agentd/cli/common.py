"""Helpers every command shares: config loading, database access, output. Nothing heavy."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from agentd.config import Config, ConfigError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Column, Table

T = TypeVar("T")
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Config file (default: $AGENTD_CONFIG, ./agentd.toml, XDG, /etc)."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

EXIT_ERROR = 1
EXIT_USAGE = 2  # what click/typer use for a wrong command line
EXIT_ALREADY_RUNNING = 3
EXIT_CONFIG = 78  # EX_CONFIG (sysexits.h): not a usage error, so scripts can tell them apart


class LazyConsole:
    """A rich Console made on first use, so commands that print JSON never import rich.

    Markup is off: what is printed is mostly text agentd stored (messages, reminders, memories,
    errors, document titles), some of it written by others, and as markup a `[/b]` in it ended
    the command with a traceback and a `[red]` restyled the owner's terminal. The few lines
    styled on purpose say `markup=True` and escape what they quote."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """The real Console (for rich APIs that take one, such as Progress)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, markup=False)
        return self._console

    def reset(self) -> None:
        """Forget the Console: the next use makes one for the terminal as it is now (its width
        is read once, when it is made; one process may run several commands, as tests do)."""
        self._console = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


err = LazyConsole(stderr=True)
out = LazyConsole()


@contextmanager
def working(what: str, *, quiet: bool = False) -> Iterator[None]:
    """Say on stderr what a slow step is doing while it runs (a spinner in a terminal, one
    line otherwise), with the terminal's echo off meanwhile: keys typed ahead (the next
    answer, maybe a secret) are not shown in clear. A password prompt after it discards them
    (getpass flushes pending input), so a key typed too early is typed again, never shown."""
    from contextlib import nullcontext

    saved = _echo_off()
    try:
        if quiet:
            shown: Any = nullcontext()
        elif err.is_terminal:
            shown = err.console.status(what)
        else:
            err.print(f"{what}…", highlight=False, markup=False)
            shown = nullcontext()
        with shown:
            yield
    finally:
        _echo_back(saved)


def _echo_off() -> Any:
    """The terminal's settings before echo went off; None when stdin is not a terminal."""
    try:
        import termios

        if not sys.stdin.isatty():
            return None
        fd = sys.stdin.fileno()
        before = termios.tcgetattr(fd)
        quiet = list(before)
        quiet[3] &= ~termios.ECHO
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
    except (ImportError, OSError, ValueError):  # termios.error is an OSError
        return None
    return before


def _echo_back(before: Any) -> None:
    if before is None:
        return
    import termios

    try:
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, before)
    except (OSError, ValueError):
        pass


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    from rich.markup import escape

    # Messages name config sections ("[skills] paths", "[[mail]]") and quote pydantic's
    # "[type=…]": as markup rich would drop them.
    err.print(
        f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True, markup=True
    )
    raise typer.Exit(code)


NO_CONFIG = (
    "no config file found (./agentd.toml, $AGENTD_CONFIG, ~/.config/agentd, /etc/agentd): "
    "pass the one `agentd init` wrote with --config PATH, or run `agentd init` first"
)


def config_missing(config: Config) -> bool:
    """True when no config file was found, the database was not named in the environment and
    none sits in this folder: most likely a command run from another folder than `agentd
    init`'s, where blaming the database would send the owner the wrong way."""
    return (
        config.source is None
        and not os.environ.get("AGENTD_STORAGE__PATH")
        and not config.db_path.exists()
    )


def config_or_exit(path: Path | None) -> Config:
    from agentd.channels import load_config  # every channel's section, validated by its model

    try:
        return load_config(path)
    except ConfigError as exc:
        fail(f"invalid configuration: {exc}", EXIT_CONFIG)


def foreign_owner(path: Path) -> str | None:
    """The database's owner when we are root and it is not: opening it would leave root-owned
    -wal/-shm files that lock the service (its own user) out."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    uid = path.stat().st_uid
    if uid == 0:
        return None
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def refuse_foreign_database(path: Path) -> None:
    """Exit when root would open another user's database (see `foreign_owner`)."""
    if path.exists() and (owner := foreign_owner(path)) is not None:
        fail(
            f"{path} belongs to {owner}; as root this command would leave root-owned database "
            f"files that lock the service out. Run it as {owner}: sudo -u {owner} agentd "
            + " ".join(sys.argv[1:])
        )


def create_database(config: Config) -> Any:
    """Open the database, creating it (0600, migrated) when it is not there yet: pairing and
    ingesting may come before the first `agentd run`. Without a config file there is no telling
    which database the daemon uses, so none is made here: a code paired or a document ingested
    into a stray one would never reach the daemon."""
    from agentd.channels import migrations
    from agentd.db import DatabaseError, open_sync
    from agentd.db.migrations import apply_migrations

    if config_missing(config):
        fail(NO_CONFIG, EXIT_CONFIG)
    refuse_foreign_database(config.db_path)
    try:
        conn = open_sync(config.db_path)
        apply_migrations(conn, migrations())
    except DatabaseError as exc:
        fail(str(exc))
    return conn


@contextmanager
def database(config: Config, *, write: bool = False) -> Iterator[Any]:
    """A short-lived connection for one command; the daemon may be running meanwhile (WAL)."""
    from agentd.channels import migrations
    from agentd.db import DatabaseError, open_sync
    from agentd.db.migrations import apply_migrations

    path = config.db_path
    if config_missing(config):
        fail(NO_CONFIG, EXIT_CONFIG)
    if not path.exists():
        where = f" (storage.path in {config.source})" if config.source else ""
        fail(
            f"database {path.resolve()} does not exist yet{where}; start the daemon with "
            "`agentd run` first, or set storage.path in the config file to the daemon's database"
        )
    refuse_foreign_database(path)
    try:
        conn = open_sync(path)
        if write:
            apply_migrations(conn, migrations())
    except DatabaseError as exc:
        fail(str(exc))
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def transaction(conn: Any) -> Iterator[Any]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SearchMode(StrEnum):
    hybrid = "hybrid"
    keyword = "keyword"
    vector = "vector"


ModeOption = Annotated[SearchMode, typer.Option(help="How to search.")]


def with_embedder(config: Config, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run `work(embedder)` with the configured embedder, closed after; its errors exit 1."""
    from agentd.retrieval.embedders import EmbedderError, build_embedder

    async def run() -> T:
        embedder = build_embedder(config.memory, config.secret_source())
        try:
            return await work(embedder)
        finally:
            await embedder.aclose()
            _count_embedding(config, embedder)

    import asyncio

    try:
        return asyncio.run(run())
    except EmbedderError as exc:
        fail(str(exc))


def _count_embedding(config: Config, embedder: Any) -> None:
    """A remote embedder's requests (a reindex, an ingest), in the daemon's ledger as the
    daemon writes its own (retrieval/spend.py); none when there is no database to write to."""
    from agentd.db import DatabaseError, open_sync
    from agentd.retrieval.spend import EmbeddingSpend, record

    spend = getattr(embedder, "spent", None)
    if not isinstance(spend, EmbeddingSpend) or config_missing(config):
        return
    requests, tokens = spend.take()
    if not requests or not config.db_path.exists() or foreign_owner(config.db_path):
        return
    try:
        conn = open_sync(config.db_path)
    except DatabaseError as exc:
        err.print(f"the embedder's requests are not in `agentd usage`: {exc}", markup=False)
        return
    try:
        record(conn, embedder.model_id, requests, tokens)
    except Exception as exc:  # busy or read-only: the command's own work is done and stands
        err.print(f"the embedder's requests are not in `agentd usage`: {exc}", markup=False)
    finally:
        conn.close()


# Free text wraps; everything else (times, ids, keys, numbers) is kept whole, so at 80 columns
# a timestamp never becomes "2026-11-23T0…".
_WRAPPING = {
    "message",
    "error",
    "last error",
    "detail",
    "arguments",
    "memory",
    "text",
    "title",
    "section",
    "reason",
}


def clip(text: str | None, limit: int) -> str:
    """Text cut to `limit` characters for a table cell, with "…" where it was cut (--json and
    `show` commands have it whole)."""
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def new_table(*columns: str | Column, **options: Any) -> Table:
    """A rich table whose identifier columns are never cut short."""
    from rich.table import Column, Table

    made = [
        c
        if isinstance(c, Column)
        else Column(c, overflow="fold")
        if c in _WRAPPING
        else Column(c, no_wrap=True)
        for c in columns
    ]
    return Table(*made, **options)


_MIN_WRAP = 16  # a wrapping column narrower than this is unreadable (the "3 characters" detail)


def _widths(table: Table, console: Console) -> list[tuple[int, bool]]:
    """Each column's widest cell or header line (no_wrap) and whether it may wrap."""
    from rich.measure import Measurement

    options = console.options
    found = []
    for column in table.columns:
        cells = [column.header, *column.cells]
        widest = max((Measurement.get(console, options, c).maximum for c in cells), default=1)
        found.append((widest, not column.no_wrap))
    return found


def _needed(table: Table, console: Console) -> int:
    chrome = 3 * len(table.columns) + 1  # borders and one space each side of every cell
    return chrome + sum(min(w, _MIN_WRAP) if wraps else w for w, wraps in _widths(table, console))


def print_table(table: Table, *, drop: tuple[str, ...] = (), empty: str = "") -> None:
    """Print a table that fits the terminal (80 columns too) without cutting a value short.

    Identifiers and numbers are never cut ("0.0…"): when the table is too wide the columns
    named in `drop` are left out, in that order (a note says which, and that --json has them);
    what still does not fit wraps. An empty table prints `empty` (a hint) instead."""
    console = out.console
    if table.row_count == 0:
        # Hints name config sections ("[[tools.mcp]]"): as markup rich would drop them.
        out.print(empty or "Nothing to show.", highlight=False, markup=False)
        return
    left_out = []
    for name in drop:
        if _needed(table, console) <= console.width:
            break
        index = next((i for i, c in enumerate(table.columns) if c.header == name), None)
        if index is not None:
            table.columns.pop(index)
            left_out.append(name.replace("\n", " "))
    if _needed(table, console) > console.width:
        for column in table.columns:  # still too wide: wrap rather than cut
            column.no_wrap, column.overflow = False, "fold"
    out.print(table)
    if left_out:
        err.print(
            f"(left out at this width: {', '.join(left_out)}; a wider terminal or "
            "--json shows them)",
            highlight=False,
        )


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


def reindex_with_bar(
    config: Config,
    label: str,
    what: str,
    pending: Callable[[Any, Any], int],
    work: Callable[[Any, Any, Callable[[int], None]], Awaitable[Any]],
    *,
    json: bool,
) -> None:
    """A reindex command: open the database, run `work(runner, embedder, advance)` with a
    progress bar of the `pending(conn, embedder)` rows on stderr (hidden for --json or when
    stderr is not a terminal), then print its report."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from agentd.db.runner import ConnRunner

    progress = Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err.console,
        transient=True,
        disable=json or not err.is_terminal,
    )
    task = progress.add_task(label, total=None)

    def advance(count: int) -> None:
        progress.update(task, advance=count)

    with database(config, write=True) as conn:

        async def run(embedder: Any) -> Any:
            progress.update(task, total=pending(conn, embedder))
            return await work(ConnRunner(conn), embedder, advance)

        with progress:
            report = with_embedder(config, run)
    if json:
        print_json(report.model_dump())
    else:
        out.print(reindexed(report, what), highlight=False)


def reindexed(report: Any, what: str) -> str:
    """What a reindex did, as a sentence (it printed its report's fields as `key: value`)."""
    space = f"{report.model_id}, {report.dim} dimensions"
    if report.embedded:
        said = f"Re-embedded {report.embedded} {what} ({space})"
    else:
        said = f"Nothing to re-embed: the {what} all have current vectors ({space})"
    if report.dropped_spaces:
        said += f"; dropped the vectors of {', '.join(report.dropped_spaces)}"
    return said + "."
