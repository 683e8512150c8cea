"""`agentd ingest` and `agentd docs`: documents for the search_docs tool (SPEC §9).

Thin over `agentd.knowledge`; heavy imports (aiohttp, pypdf) happen inside the commands.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Column

from agentd.cli.common import (
    EXIT_USAGE,
    ConfigOption,
    JsonOption,
    ModeOption,
    SearchMode,
    clip,
    config_or_exit,
    create_database,
    database,
    err,
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
from agentd.config import Config

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from agentd.knowledge.ingest import IngestReport

app = typer.Typer(help="Ingested documents: list, remove, search, reindex.", no_args_is_help=True)


def _source_column() -> Column:
    # Paths and URLs are what a user copies into `docs rm`: wrap them, never cut them short.
    return Column("source", overflow="fold")


class _Bar:
    """IngestProgress drawn as a rich progress bar on stderr."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID = progress.add_task("ingesting", total=0)
        self._total = 0

    def add_total(self, count: int) -> None:
        self._total += count
        self._progress.update(self._task, total=self._total)

    def advance(self, source: str) -> None:
        name = source if len(source) <= 40 else "…" + source[-39:]
        self._progress.update(self._task, advance=1, description=name)


def _ensure_database(cfg: Config) -> None:
    """Ingesting may come before the first `agentd run`: create the database then."""
    if not cfg.db_path.exists():
        create_database(cfg).close()


def _print_report(report: IngestReport) -> None:
    counts = report.counts()
    table = new_table(
        "added",
        "changed",
        "unchanged",
        "removed",
        "failed",
        "chunks embedded",
        "seconds",
        title="Ingested",
    )
    table.add_row(
        *(str(counts[k]) for k in counts), str(report.chunks_embedded), f"{report.seconds:.1f}"
    )
    print_table(table)
    if report.failed:
        failures = new_table(_source_column(), "reason", title="Not ingested")
        for failure in report.failed:
            failures.add_row(failure.source, failure.reason)
        print_table(failures)
    if report.ignored:
        out.print(f"{report.ignored} file(s) of other types were ignored.")
    if report.aborted:
        from rich.markup import escape

        err.print(f"[bold red]stopped:[/] {escape(report.aborted)}", highlight=False, markup=True)


def ingest(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Files and folders (.txt, .md, .html, .pdf).")
    ] = None,
    urls: Annotated[
        Path | None, typer.Option("--urls", help="A file with one URL per line.")
    ] = None,
    sitemap: Annotated[
        str | None, typer.Option("--sitemap", help="The URL of a sitemap.xml.")
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Add or update documents for search_docs; only what changed is re-embedded."""
    if not paths and urls is None and sitemap is None:
        fail("give files or folders, --urls FILE or --sitemap URL", EXIT_USAGE)
    missing = [str(p) for p in [*(paths or []), *([urls] if urls else [])] if not p.exists()]
    if missing:
        fail(f"not found: {', '.join(missing)}; give existing files or folders")
    cfg = config_or_exit(config)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from agentd.db.runner import ConnRunner
    from agentd.knowledge.ingest import ingest as run_ingest
    from agentd.tools.fetch import fetch_policy

    _ensure_database(cfg)
    _quiet_pdf_library()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err.console,
        transient=True,
        disable=json or not err.is_terminal,
    )

    async def run(conn: Any, embedder: Any) -> IngestReport:
        with progress:
            return await run_ingest(
                ConnRunner(conn),
                embedder,
                cfg.docs,
                paths=paths or (),
                url_file=urls,
                sitemap=sitemap,
                policy=fetch_policy(cfg.tools.fetch),
                progress=_Bar(progress),
            )

    with database(cfg, write=True) as conn:
        report = with_embedder(cfg, lambda embedder: run(conn, embedder))
    if json:
        print_json(report.model_dump())
    else:
        _print_report(report)
    if report.aborted or report.failed:  # a script must see that some files did not go in
        raise typer.Exit(1)


def _quiet_pdf_library() -> None:
    """pypdf logs its parsing complaints as warnings, which reached the terminal raw (Python's
    last-resort handler); a file it cannot read is reported in "Not ingested" instead."""
    import logging

    pdf_log = logging.getLogger("pypdf")
    pdf_log.addHandler(logging.NullHandler())
    pdf_log.propagate = False


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """List ingested documents: status (ingested, stale, failed), tokens, text kept."""
    from agentd.knowledge.store import list_documents

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        docs = list_documents(conn, limit=1_000_000)
    if json:
        print_json(
            [
                {
                    **d.model_dump(exclude={"raw_text"}),
                    "created_at": iso(d.created_at),
                    "updated_at": iso(d.updated_at),
                }
                for d in docs
            ]
        )
        return
    table = new_table(
        "id",
        "title",
        "status",
        "why",
        "chunks",
        "tokens",
        "text",
        "format",
        "updated (UTC)",
        _source_column(),
    )
    for d in docs:
        why = "" if d.error is None else d.error if len(d.error) <= 60 else d.error[:59] + "…"
        table.add_row(
            str(d.id),
            clip(d.title, 60),
            d.status,
            why,
            str(d.chunks),
            str(d.tokens),
            _text_size(d.text_chars, d.kept_chars),
            d.format,
            iso(d.updated_at),
            d.source,
        )
    print_table(
        table,
        drop=("format", "updated (UTC)", "text", "why", "tokens"),
        empty="No documents yet: agentd ingest PATH… adds some.",
    )


def _text_size(total: int | None, kept: int) -> str:
    """The parsed text's size in characters, and how much of it is kept when not all."""
    if total is None:
        return "-"  # ingested before its text was measured
    return f"{total}" if kept >= total else f"{total} ({kept} kept)"


@app.command("rm")
def rm(
    target: Annotated[str, typer.Argument(help="A document id, a source, or a folder.")],
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Remove a document (by id or source), or every document ingested from a folder."""
    from agentd.knowledge.store import (
        get_document,
        get_document_by_id,
        remove_sources,
        sources_under,
    )

    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        doc = get_document_by_id(conn, int(target)) if target.isdecimal() else None
        doc = doc or get_document(conn, target)
        absolute = os.path.abspath(os.path.expanduser(target))
        doc = doc or get_document(conn, absolute)
        sources = [doc.source] if doc is not None else sources_under(conn, absolute)
        remove_sources(conn, sources)
    if json:
        print_json({"removed": sources})
    elif not sources:
        fail(f"no document {target!r} (see agentd docs ls)")
    else:
        out.print(f"Removed {len(sources)} document(s).")


@app.command("search")
def search(
    query: str,
    k: Annotated[int, typer.Option("-k", min=1, max=50)] = 5,
    mode: ModeOption = SearchMode.hybrid,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Search the documents the way the search_docs tool does."""
    from agentd.db.runner import ConnRunner
    from agentd.knowledge.search import search_documents
    from agentd.retrieval.fusion import fusion_from_config

    cfg = config_or_exit(config)
    with database(cfg) as conn:
        hits = with_embedder(
            cfg,
            lambda embedder: search_documents(
                ConnRunner(conn),
                embedder,
                query,
                k=k,
                mode=mode.value,
                fusion=fusion_from_config(cfg.memory),
            ),
        )
    if json:
        print_json([h.model_dump() for h in hits])
        return
    table = new_table("#", "score", "title", "section", "text", _source_column(), show_lines=True)
    for number, h in enumerate(hits, start=1):
        text = " ".join(h.text.split())
        table.add_row(str(number), f"{h.score:.4f}", h.title, h.section, clip(text, 160), h.source)
    print_table(table, drop=("section", "title"), empty="No document matches.")


@app.command("reindex")
def reindex(
    force: Annotated[
        bool, typer.Option(help="Re-embed every chunk, not only those without a current vector.")
    ] = False,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Re-embed document chunks with the configured embedder (after changing the model)."""
    from agentd.knowledge.reindex import reindex_documents
    from agentd.knowledge.store import chunk_vector_counts

    def pending(conn: Any, embedder: Any) -> int:
        total, current = chunk_vector_counts(conn, embedder.model_id, embedder.dim)
        return total if force else total - current

    cfg = config_or_exit(config)
    _ensure_database(cfg)
    reindex_with_bar(
        cfg,
        "re-embedding document chunks",
        "document chunks",
        pending,
        lambda db, embedder, advance: reindex_documents(
            db, embedder, force=force, progress=advance
        ),
        json=json,
    )
