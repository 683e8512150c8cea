"""Ingestion: files, folders, URL lists and sitemaps into the document store, incrementally.

Per document: the raw bytes are hashed (with the chunking settings); an unchanged hash skips
the document without parsing it. A changed one is parsed and chunked, and only chunks whose
hash the stored document does not already have (with a vector of the current model) are
embedded: editing one paragraph re-embeds one or two chunks. What disappeared is deleted: files
gone from an ingested folder, pages gone from a URL list or sitemap, chunks gone from a
document. Embedding happens outside transactions; each document is written in one.

A bad input (unreadable, invalid UTF-8, broken PDF, too big, unreachable, HTTP error) is a
`Failure` in the report and the run goes on; its stored version, if any, is kept and marked
`stale`, and a document never read is stored as `failed` with the reason. Only an
embedder failure stops the run (every later document would fail the same way); the report
says so in `aborted` and nothing is removed.

URLs are fetched with `agentd.net.safe_fetch` under the caller's FetchPolicy (SSRF checks on
every hop), a few at a time, and written in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import stat
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field
from yarl import URL

from agentd.config import DocsConfig
from agentd.db.runner import Runner
from agentd.knowledge.chunking import CHUNKER_VERSION, Chunk, chunk_blocks
from agentd.knowledge.loaders import (
    EXTENSIONS,
    DocFormat,
    LoadedDocument,
    LoadError,
    format_for_path,
    parse_bytes_bounded,
)
from agentd.knowledge.sitemap import SitemapError, sitemap_urls
from agentd.knowledge.store import (
    DocKind,
    NewDocument,
    chunk_states,
    chunks_without_vector,
    get_document,
    mark_stale,
    record_failure,
    remove_sources,
    save_document,
    set_chunk_vectors,
    sources_of_root,
    sources_under,
    touch_document,
)
from agentd.net.safe_fetch import (
    FetchError,
    FetchPolicy,
    RawResponse,
    decode_text,
    fetch_raw,
    is_textual,
)
from agentd.retrieval.embedders import Embedder, EmbedderError

log = logging.getLogger(__name__)

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_MARKDOWN_TYPES = frozenset({"text/markdown", "text/x-markdown"})


class Failure(BaseModel):
    source: str
    reason: str


class IngestReport(BaseModel):
    """What one `agentd ingest` run did; `--json` prints exactly this."""

    added: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    failed: list[Failure] = Field(default_factory=list)
    ignored: int = 0  # files in ingested folders of a type that is not read
    chunks_embedded: int = 0
    seconds: float = 0.0
    aborted: str | None = None

    def counts(self) -> dict[str, int]:
        return {
            "added": len(self.added),
            "changed": len(self.changed),
            "unchanged": len(self.unchanged),
            "removed": len(self.removed),
            "failed": len(self.failed),
        }


class IngestProgress(Protocol):
    """Told how many documents there are (in steps: a sitemap's size is known late) and when
    each is done; the CLI draws a rich progress bar with it."""

    def add_total(self, count: int) -> None: ...

    def advance(self, source: str) -> None: ...


class _NoProgress:
    def add_total(self, count: int) -> None:
        return None

    def advance(self, source: str) -> None:
        return None


class _Aborted(Exception):
    pass


def _readable(content_type: str) -> bool:
    return is_textual(content_type) or content_type.lower() == "application/pdf"


def _url_format(raw: RawResponse) -> DocFormat:
    ct = raw.content_type.lower()
    if not ct:
        head = raw.body[:1024].lstrip().lower()
        if head.startswith(b"%pdf-"):
            return "pdf"
        return "html" if b"<html" in head or b"<!doctype html" in head else "text"
    if ct in _HTML_TYPES:
        return "html"
    if ct == "application/pdf":
        return "pdf"
    path = URL(raw.url).path.lower()
    if ct in _MARKDOWN_TYPES or path.endswith((".md", ".markdown")):
        return "markdown"
    return "text"


def _walk(folder: Path) -> Iterable[Path]:
    """Files under a folder, sorted; hidden files and folders (.git, .venv) are not entered."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name  # FIFOs and devices fail in _read_file, not here


def _read_file(path: Path, max_bytes: int) -> bytes:
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise LoadError("not a regular file")  # a FIFO or device would block or never end
        size = info.st_size
        if size > max_bytes:
            raise LoadError(f"{size} bytes is over docs.max_file_bytes ({max_bytes}); skipped")
        # Read one byte past the limit: the file may have grown since stat().
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise LoadError(f"over docs.max_file_bytes ({max_bytes}); skipped")
    return data


def _absolute(path: str | Path) -> Path:
    # Not resolve(): a symlinked folder keeps the name the user gave it, so its files stay
    # "under" it when it is ingested again.
    return Path(os.path.abspath(os.path.expanduser(path)))


def _read_url_list(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@dataclass
class _Plan:
    files: dict[Path, str] = field(default_factory=dict)  # file -> the root it came through
    folders: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    ignored: int = 0


def _plan_paths(paths: Sequence[str | Path]) -> _Plan:
    """Which files to ingest (blocking file-system work, run in a thread)."""
    plan = _Plan()
    for raw in paths:
        path = _absolute(raw)
        if path.is_dir():
            plan.folders.append(str(path))
            for file in _walk(path):
                if format_for_path(file) is None:
                    plan.ignored += 1
                else:
                    plan.files.setdefault(file, str(path))
        elif path.is_file():
            if format_for_path(path) is None:
                kinds = ", ".join(sorted(EXTENSIONS))
                reason = f"unsupported file type {path.suffix or '(none)'}; read: {kinds}"
                plan.failed.append(Failure(source=str(path), reason=reason))
            else:
                plan.files.setdefault(path, str(path))
        else:
            plan.missing.append(str(path))
    return plan


class Ingestor:
    """One ingestion run; call the `ingest_*` methods, then read `report`."""

    def __init__(
        self,
        db: Runner,
        embedder: Embedder,
        config: DocsConfig,
        *,
        policy: FetchPolicy | None = None,
        progress: IngestProgress | None = None,
    ) -> None:
        self.db = db
        self.embedder = embedder
        self.config = config
        self.policy = policy or FetchPolicy()
        self.progress = progress or _NoProgress()
        self.report = IngestReport()

    # -- documents ------------------------------------------------------------------------------

    def _content_hash(self, fmt: str, data: bytes) -> str:
        # The chunking settings are part of the hash: changing them re-chunks every document.
        settings = (
            f"agentd-docs v{CHUNKER_VERSION} {fmt} "
            f"{self.config.chunk_chars}/{self.config.overlap_chars}\n"
        )
        return hashlib.sha256(settings.encode() + data).hexdigest()

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = await self.embedder.embed_documents(texts)
        if len(vectors) != len(texts):
            raise EmbedderError(f"asked for {len(texts)} vectors, got {len(vectors)}")
        self.report.chunks_embedded += len(texts)
        return vectors

    async def _ingest_document(
        self,
        *,
        source: str,
        kind: DocKind,
        root: str,
        fmt: DocFormat,
        data: bytes,
        parse: Callable[[], Awaitable[LoadedDocument]],
    ) -> None:
        model_id, dim = self.embedder.model_id, self.embedder.dim
        content_hash = self._content_hash(fmt, data)
        existing = await self.db.read(get_document, source)
        if existing is not None and existing.content_hash == content_hash:
            # Unchanged; but after a change of embedding model its chunks need new vectors.
            missing = await self.db.read(chunks_without_vector, existing.id, model_id, dim)
            if missing:
                texts = [Chunk(0, section, text).embed_text for _, section, text in missing]
                vectors = await self._embed(texts)
                pairs = [(cid, vec) for (cid, _, _), vec in zip(missing, vectors, strict=True)]
                await self.db.write(set_chunk_vectors, model_id, pairs)
            if existing.root != root or existing.status != "ingested":
                await self.db.write(touch_document, existing.id, root)
            self.report.unchanged.append(source)
            return
        loaded = await parse()
        chunks = chunk_blocks(loaded.blocks, self.config.chunk_chars, self.config.overlap_chars)
        if not chunks:
            hint = " (a scanned PDF? it needs OCR first)" if fmt == "pdf" else ""
            raise LoadError(f"no text found{hint}")
        have: set[str] = set()
        if existing is not None:
            states = await self.db.read(chunk_states, existing.id, model_id, dim)
            have = {s.hash for s in states if s.has_vector}
        needed: dict[str, str] = {}
        for chunk in chunks:
            if chunk.hash not in have:
                needed.setdefault(chunk.hash, chunk.embed_text)
        vectors = await self._embed(list(needed.values()))
        text = "\n\n".join(block.text for block in loaded.blocks)
        keep = self.config.keep_text_chars
        doc = NewDocument(
            source=source,
            kind=kind,
            root=root,
            title=loaded.title[:500],
            format=loaded.format,
            content_hash=content_hash,
            size=len(data),
            raw_text=text[:keep] if keep else None,
            text_chars=len(text),
        )
        await self.db.write(
            save_document, doc, chunks, dict(zip(needed, vectors, strict=True)), model_id
        )
        new = existing is None or existing.chunks == 0  # a `failed` row held nothing
        (self.report.added if new else self.report.changed).append(source)

    async def _failed(self, source: str, reason: str, kind: DocKind, root: str) -> None:
        self.report.failed.append(Failure(source=source, reason=reason))
        await self.db.write(record_failure, source, kind, root, reason)

    async def _guarded(
        self, source: str, work: Callable[[], Awaitable[None]], kind: DocKind, root: str
    ) -> None:
        """Run one document's ingestion; its failure is reported and recorded, never raised."""
        try:
            await work()
        except (LoadError, FetchError) as exc:
            await self._failed(source, str(exc), kind, root)
        except EmbedderError as exc:
            self.report.failed.append(Failure(source=source, reason=f"embedder: {exc}"))
            self.report.aborted = f"the embedder failed, so the run stopped: {exc}"
            raise _Aborted from None
        except Exception as exc:
            # A bug or an odd input no branch foresaw: one document, not the run.
            log.exception("ingesting %s failed", source)
            reason = f"unexpected error: {type(exc).__name__}: {exc}"
            await self._failed(source, reason, kind, root)
        finally:
            self.progress.advance(source)

    async def _remove(self, sources: Sequence[str]) -> None:
        if sources:
            await self.db.write(remove_sources, list(sources))
            self.report.removed.extend(sources)

    # -- files ----------------------------------------------------------------------------------

    async def _ingest_file(self, path: Path, root: str) -> None:
        fmt = format_for_path(path)
        assert fmt is not None  # only supported files are planned
        data = await asyncio.to_thread(_read_file, path, self.config.max_file_bytes)

        async def parse() -> LoadedDocument:
            # Off the event loop and bounded: a file is outside data, whatever its folder.
            return await parse_bytes_bounded(data, fmt, fallback_title=path.name)

        await self._ingest_document(
            source=str(path), kind="file", root=root, fmt=fmt, data=data, parse=parse
        )

    async def ingest_bytes(self, *, source: str, data: bytes, fmt: DocFormat, title: str) -> None:
        """One document already in memory (a file sent in chat); failures go to the report."""

        async def parse() -> LoadedDocument:
            return await parse_bytes_bounded(data, fmt, fallback_title=title)

        self.progress.add_total(1)
        work = self._ingest_document(
            source=source, kind="file", root=source, fmt=fmt, data=data, parse=parse
        )
        with contextlib.suppress(_Aborted):
            await self._guarded(source, lambda: work, "file", source)

    async def ingest_paths(self, paths: Sequence[str | Path]) -> None:
        """Files and folders (recursively). A folder's files that disappeared are removed."""
        plan = await asyncio.to_thread(_plan_paths, paths)
        self.report.ignored += plan.ignored
        self.report.failed.extend(plan.failed)
        for path in plan.missing:
            if not await self._forget_vanished(path):
                self.report.failed.append(Failure(source=path, reason="no such file or folder"))
        self.progress.add_total(len(plan.files))
        for file, root in plan.files.items():
            work = partial(self._ingest_file, file, root)
            await self._guarded(str(file), work, "file", root)
        for folder in plan.folders:
            stored = await self.db.read(sources_under, folder)
            await self._remove([s for s in stored if Path(s) not in plan.files])

    async def _forget_vanished(self, path: str) -> bool:
        """A path that no longer exists but was ingested (a file or a whole folder): remove."""
        stored = await self.db.read(sources_under, path)
        if await self.db.read(get_document, path) is not None:
            stored.append(path)
        await self._remove(stored)
        return bool(stored)

    # -- URLs -----------------------------------------------------------------------------------

    async def _fetch(self, url: str) -> RawResponse | FetchError:
        try:
            return await fetch_raw(url, self.policy, accept=_readable)
        except FetchError as exc:
            return exc
        except Exception as exc:  # never let one odd URL take the run down
            return FetchError(f"{type(exc).__name__}: {exc}")

    async def _ingest_fetched(self, url: str, fetched: RawResponse | FetchError, root: str) -> None:
        if isinstance(fetched, FetchError):
            raise fetched
        if fetched.status >= 400:
            raise LoadError(f"HTTP {fetched.status} {fetched.reason}".rstrip())
        fmt = _url_format(fetched)
        parsed = URL(url)
        fallback = f"{parsed.host or ''}{parsed.path}".rstrip("/") or url

        async def parse() -> LoadedDocument:
            if fmt == "pdf":
                return await parse_bytes_bounded(fetched.body, fmt, fallback_title=fallback)
            # Decoded here (the response's charset), parsed in the bounded child as UTF-8.
            text = decode_text(fetched, fmt == "html")
            return await parse_bytes_bounded(
                text.encode("utf-8", "replace"), fmt, fallback_title=fallback, decoded=True
            )

        await self._ingest_document(
            source=url, kind="url", root=root, fmt=fmt, data=fetched.body, parse=parse
        )

    async def ingest_urls(self, urls: Sequence[str], *, root: str, remove_missing: bool) -> None:
        """Fetch pages a few at a time (in order of the list) and ingest each; with
        remove_missing, pages last ingested through `root` and not in `urls` are deleted."""
        urls = list(dict.fromkeys(u.strip() for u in urls if u.strip()))
        self.progress.add_total(len(urls))
        pending: deque[tuple[str, asyncio.Task[RawResponse | FetchError]]] = deque()
        queue = iter(urls)
        try:
            for url in queue:
                pending.append((url, asyncio.create_task(self._fetch(url))))
                if len(pending) >= self.config.fetch_concurrency:
                    break
            while pending:
                url, task = pending.popleft()
                fetched = await task
                following = next(queue, None)
                if following is not None:
                    pending.append((following, asyncio.create_task(self._fetch(following))))
                work = partial(self._ingest_fetched, url, fetched, root)
                await self._guarded(url, work, "url", root)
        finally:
            for _, task in pending:
                task.cancel()
        wanted = set(urls)
        missing = [s for s in await self.db.read(sources_of_root, root) if s not in wanted]
        if remove_missing:
            await self._remove(missing)
        else:  # part of the sitemap could not be read: they may be there, or gone
            reason = "not in the part of the sitemap that could be read; kept until it is whole"
            await self.db.write(mark_stale, missing, reason)

    async def ingest_url_file(self, file: str | Path) -> None:
        """A file of URLs, one per line (blank lines and # comments skipped)."""
        path = _absolute(file)
        try:
            urls = await asyncio.to_thread(_read_url_list, path)
        except (OSError, UnicodeDecodeError) as exc:
            reason = f"cannot read the URL list: {getattr(exc, 'strerror', None) or exc}"
            self.report.failed.append(Failure(source=str(path), reason=reason))
            return
        await self.ingest_urls(urls, root=f"urls:{path}", remove_missing=True)

    async def ingest_sitemap(self, url: str) -> None:
        """Every page a sitemap (or sitemap index) lists, up to docs.max_urls."""
        try:
            found = await sitemap_urls(url, self.policy, max_urls=self.config.max_urls)
        except (SitemapError, FetchError) as exc:
            self.report.failed.append(Failure(source=url, reason=f"sitemap: {exc}"))
            return
        for problem in found.problems:
            self.report.failed.append(Failure(source=problem.source, reason=problem.reason))
        # Remove pages gone from the sitemap only when all of it was read.
        await self.ingest_urls(found.urls, root=url, remove_missing=found.complete)


async def ingest(
    db: Runner,
    embedder: Embedder,
    config: DocsConfig,
    *,
    paths: Sequence[str | Path] = (),
    url_file: str | Path | None = None,
    sitemap: str | None = None,
    policy: FetchPolicy | None = None,
    progress: IngestProgress | None = None,
) -> IngestReport:
    """Ingest paths, a URL list and a sitemap (any of them) and report what happened."""
    started = time.perf_counter()
    run = Ingestor(db, embedder, config, policy=policy, progress=progress)
    try:
        if paths:
            await run.ingest_paths(paths)
        if url_file is not None:
            await run.ingest_url_file(url_file)
        if sitemap is not None:
            await run.ingest_sitemap(sitemap)
    except _Aborted:
        pass
    run.report.seconds = round(time.perf_counter() - started, 3)
    return run.report
