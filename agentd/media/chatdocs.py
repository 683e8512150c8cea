"""Documents sent in chat: read for the conversation, kept for search_docs only on request.

Reading uses the same loaders as `agentd ingest`. Ingesting into the document store happens
only when the user presses the "Add to my documents" button or asks (the save_chat_document
tool); both download the file again by its id, so the journal never holds the file's bytes.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from functools import partial
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel, Field

from agentd.chat.delivery import deliver
from agentd.chat.inputs import CallbackPress, MediaRef
from agentd.chat.names import chat_key
from agentd.chat.outbox import Button, Outbox
from agentd.chat.sent_files import holds_sent_files
from agentd.config import Config
from agentd.db import Database
from agentd.durable import NonRetryable, Step, Workflow, workflow
from agentd.knowledge.ingest import Ingestor
from agentd.knowledge.loaders import (
    EXTENSIONS,
    DocFormat,
    LoadedDocument,
    LoadError,
    parse_bytes_bounded,
)
from agentd.media.vision import Files
from agentd.retrieval.embedders import Embedder
from agentd.tools.base import Tool, ToolContext
from agentd.tools.toolset import Toolset

CALLBACK_PREFIX = "doc:"
INGEST_WORKFLOW = "doc_ingest"
_MIME_FORMATS: dict[str, DocFormat] = {
    "application/pdf": "pdf",
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
}
SUPPORTED = "PDF, plain text, Markdown and HTML (.pdf, .txt, .md, .html)"


class ReadDocument(BaseModel):
    """A document as the turn sees it: its text, cut to the prompt budget."""

    doc_id: str
    file_name: str
    title: str
    format: DocFormat
    text: str
    total_chars: int
    truncated: bool


class IngestInput(BaseModel):
    doc_id: str
    chat_id: int
    user_id: int
    reply_to: int | None = None


class IngestOutput(BaseModel):
    outcome: str
    message_ids: list[int] = Field(default_factory=list)


@dataclass(frozen=True)
class DocDeps:
    config: Config
    db: Database
    files: Files
    embedder: Embedder | None  # None: documents are read, never ingested


def document_id(update_id: int) -> str:
    return f"u{update_id}"


def format_of(media: MediaRef) -> DocFormat | None:
    """The format the file name (or, lacking an extension, the MIME type) implies."""
    ext = PurePath(media.file_name).suffix.lower()
    if ext:
        return EXTENSIONS.get(ext)
    return _MIME_FORMATS.get(media.mime_type.split(";")[0].strip().lower())


def refusal(media: MediaRef, max_bytes: int) -> str | None:
    """Why this document is not read (a reply for the user), or None when it can be."""
    name = media.file_name or "that file"
    if format_of(media) is None:
        return f"I can't read {name}: I read {SUPPORTED} files. Please send one of those."
    if media.file_size > max_bytes:
        return (
            f"{name} is {media.file_size / 1e6:.1f} MB; I read documents up to "
            f"{max_bytes / 1e6:.1f} MB. Please send a smaller file."
        )
    return None


def _text_of(loaded: LoadedDocument) -> tuple[str, str]:
    parts = []
    last_path: tuple[str, ...] = ()
    for block in loaded.blocks:
        if block.path and block.path != last_path:
            parts.append("## " + " › ".join(block.path))
            last_path = block.path
        parts.append(block.text)
    return loaded.title, "\n\n".join(parts)


async def read_document(
    deps: DocDeps, media: MediaRef, doc_id: str, chat_id: int, user_id: int
) -> ReadDocument:
    """Download, extract the text (as `agentd ingest` would) and remember the file for later."""
    fmt = format_of(media)
    if fmt is None:
        raise NonRetryable(f"unsupported document type: {media.file_name or media.mime_type}")
    limit = deps.config.media.max_document_bytes
    data = await deps.files.download(media.file_id, limit)
    name = media.file_name or f"document.{fmt}"
    try:
        # A chat document is outside data: parsed in a bounded child, off the event loop.
        title, text = _text_of(await parse_bytes_bounded(data, fmt, fallback_title=name))
    except LoadError as exc:
        raise NonRetryable(str(exc)) from None
    if not text.strip():
        hint = " (a scanned PDF? it needs OCR first)" if fmt == "pdf" else ""
        raise NonRetryable(f"no text found{hint}")
    digest = hashlib.sha256(data).hexdigest()
    await deps.db.write(
        lambda conn: conn.execute(
            "INSERT OR IGNORE INTO chat_documents (id, chat_id, user_id, file_id, file_name, "
            "format, sha256, size, title, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                doc_id,
                chat_id,
                user_id,
                media.file_id,
                name,
                fmt,
                digest,
                len(data),
                title,
                time.time(),
            ),
        )
    )
    budget = deps.config.media.document_prompt_chars
    return ReadDocument(
        doc_id=doc_id,
        file_name=name,
        title=title,
        format=fmt,
        text=text[:budget],
        total_chars=len(text),
        truncated=len(text) > budget,
    )


def describe(doc: ReadDocument, can_save: bool) -> str:
    """The document as data for the model's context, with what was cut and how to keep it."""
    head = (
        f'Document sent with this message: "{doc.title}" ({doc.file_name}, {doc.format}, '
        f"{doc.total_chars} characters, document id {doc.doc_id})"
    )
    parts = [head, doc.text]
    if doc.truncated:
        parts.append(
            f"[Only the first {len(doc.text)} of {doc.total_chars} characters are "
            "shown; the rest was cut to fit.]"
        )
    if can_save:
        parts.append(
            f"[Not in the document library. If the user asks to keep it, call "
            f'save_chat_document with document_id "{doc.doc_id}".]'
        )
    return "\n".join(parts)


def _row(conn: Any, doc_id: str) -> Any:
    return conn.execute(
        "SELECT chat_id, file_id, file_name, format, sha256, ingested_at FROM chat_documents "
        "WHERE id = ?",
        (doc_id,),
    ).fetchone()


class Saved(BaseModel):
    file_name: str
    status: str  # added | changed | unchanged | already
    chunks: int = 0


async def ingest_chat_document(
    deps: DocDeps, doc_id: str, chat_id: int, user_id: int | None = None
) -> Saved:
    """Put a document from this chat into the store for search_docs (idempotent), as the
    document of the user who asked (only they search it: knowledge/tools.py)."""
    if deps.embedder is None:
        raise NonRetryable("the document library is not available (no embedder)")
    row = await deps.db.read(_row, doc_id)
    if row is None or row[0] != chat_id:
        raise NonRetryable(f"no document {doc_id!r} was sent in this chat")
    _, file_id, name, fmt, digest, ingested_at = row
    if ingested_at is not None:
        return Saved(file_name=name, status="already")
    data = await deps.files.download(file_id, deps.config.media.max_document_bytes)
    if hashlib.sha256(data).hexdigest() != digest:
        raise NonRetryable(f"{name} changed since it was sent; please send it again")
    run = Ingestor(deps.db, deps.embedder, deps.config.docs)
    source = f"chat:{chat_id}/{name}"  # whichever channel it came through
    await run.ingest_bytes(source=source, data=data, fmt=fmt, title=name)
    if run.report.failed:
        raise NonRetryable(f"{name} could not be added: {run.report.failed[0].reason}")
    status = "added" if run.report.added else "changed" if run.report.changed else "unchanged"
    now = time.time()

    def mark(c: Any) -> None:
        c.execute("UPDATE chat_documents SET ingested_at = ? WHERE id = ?", (now, doc_id))
        c.execute("UPDATE doc_documents SET added_by = ? WHERE source = ?", (user_id, source))

    await deps.db.write(mark)
    return Saved(file_name=name, status=status, chunks=run.report.chunks_embedded)


def offer_buttons(doc_id: str) -> list[list[Button]]:
    return [[Button(text="📚 Add to my documents", data=f"{CALLBACK_PREFIX}{doc_id}")]]


def offer_text(doc: ReadDocument) -> str:
    return f"Shall I add *{doc.file_name}* to your documents, so I can search it later?"


def saved_text(saved: Saved) -> str:
    if saved.status == "already":
        return f"{saved.file_name} is already in your documents."
    return f"Added {saved.file_name} to your documents; search_docs can find it now."


def document_callbacks(engine: Any, fallback: Any) -> Any:
    """A callback handler for "doc:" buttons that hands every other press to `fallback`.

    Runs inside the intake transaction: a press starts the ingest workflow once (its id comes
    from the document), so a double press or a redelivered update adds the document once.
    """

    def handle(conn: Any, press: CallbackPress) -> str:
        if not press.data.startswith(CALLBACK_PREFIX):
            return str(fallback(conn, press))
        doc_id = press.data[len(CALLBACK_PREFIX) :][:40]
        row = _row(conn, doc_id)
        if row is None or row[0] != press.chat_id:
            return "I don't have that document any more; please send it again."
        if row[5] is not None:
            return f"{row[2]} is already in your documents."
        inp = IngestInput(
            doc_id=doc_id, chat_id=press.chat_id, user_id=press.user_id, reply_to=press.message_id
        )
        engine.prepare_start(
            conn,
            INGEST_WORKFLOW,
            inp,
            instance_id=f"doc-ingest-{doc_id}",
            key=chat_key(press.chat_id),
        )
        return f"Adding {row[2]} to your documents…"

    return handle


def make_ingest_workflow(deps: DocDeps, outbox: Outbox) -> Workflow[IngestInput, IngestOutput]:
    @workflow(INGEST_WORKFLOW)
    async def ingest(step: Step, inp: IngestInput) -> IngestOutput:
        from agentd.durable import StepFailed

        try:
            saved = await step.do(
                "ingest", ingest_chat_document, deps, inp.doc_id, inp.chat_id, inp.user_id
            )
            text, outcome = saved_text(saved), saved.status
        except StepFailed as exc:
            text, outcome = f"I couldn't add that document: {exc.message[:300]}", "error"
        sent = await deliver(
            step,
            deps.db,
            "send",
            inp.chat_id,
            partial(outbox.send_text, inp.chat_id, text, reply_to=inp.reply_to),
        )
        return IngestOutput(outcome=outcome, message_ids=[sent])

    return ingest


class SaveArgs(BaseModel):
    document_id: str = Field(
        description="The document id shown with the document, e.g. u123.", max_length=40
    )


def chat_document_tools(deps: DocDeps) -> list[Tool]:
    """save_chat_document: the user asked to keep a document they sent in this chat."""
    if deps.embedder is None:
        return []

    # NonRetryable says why a document cannot be added (gone, too big, unreadable).
    chat = Toolset(timeout=120.0, errors=(NonRetryable,))

    # It adds to the owner's library (egress): after outside content it asks, and the offer's
    # "Add to my documents" button needs no model at all.
    @chat.tool(
        risk="low",
        egress=True,
        offered=holds_sent_files,
        description="Add a document the user sent in this chat to their document library "
        "(for search_docs later). Only when the user asks to keep or save it.",
    )
    async def save_chat_document(ctx: ToolContext, args: SaveArgs) -> str:
        saved = await ingest_chat_document(deps, args.document_id, ctx.chat_id, ctx.user_id)
        return saved_text(saved)

    return chat.tools()
