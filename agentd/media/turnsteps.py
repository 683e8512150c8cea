"""The turn's media steps: hear a voice note, read a document, send files, offer to keep docs."""

from __future__ import annotations

import asyncio
import logging
import os
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agentd.chat.delivery import deliver
from agentd.chat.inputs import TurnInput
from agentd.chat.outbox import Outbox
from agentd.chat.outfiles import SpooledFile
from agentd.config import MediaConfig
from agentd.db import Database
from agentd.durable import NonRetryable, Step, StepFailed
from agentd.media import chatdocs, voice
from agentd.media.chatdocs import DocDeps, ReadDocument
from agentd.media.voice import VoiceDeps

log = logging.getLogger(__name__)


class MediaIn(BaseModel):
    """What the message's media adds to the turn (deterministic on replay: built from steps)."""

    user_text: str | None = None  # replaces the message text (a transcript)
    notes: list[str] = Field(default_factory=list)  # data for the model (a document)
    reply: str | None = None  # answer this at once, with no model call
    outcome: str = ""  # the reply's outcome for history and audit
    failed: str | None = None  # the step that failed: the turn ends errored, retryable
    echo: str | None = None  # what was heard, quoted back to the user
    offer: ReadDocument | None = None  # a document the user may add to the library
    meta: dict[str, Any] = Field(default_factory=dict)  # file id and hash for the history


async def _hear(step: Step, deps: VoiceDeps | None, config: MediaConfig, inp: TurnInput) -> MediaIn:
    assert inp.media is not None
    meta: dict[str, Any] = {"file_id": inp.media.file_id, "media": inp.media.kind}
    if deps is None:
        return MediaIn(reply=voice.no_backend_reply(), outcome="unsupported", meta=meta)
    try:
        by = voice.Payer(chat_id=inp.chat_id, user_id=inp.user_id, instance_id=step.instance_id)
        heard = await step.do("transcribe", voice.hear, deps, inp.media, by)
    except StepFailed as exc:
        meta["transcription_error"] = exc.message[:300]
        return MediaIn(reply=voice.FAILED_REPLY, outcome="error", failed=exc.step, meta=meta)
    meta["sha256"] = heard.sha256
    if heard.dropped:
        return MediaIn(reply=voice.NOT_HEARD_REPLY, outcome="not_heard", meta=meta)
    return MediaIn(
        user_text=voice.as_user_text(inp.media, heard, inp.text),
        echo=voice.echo_text(heard) if config.echo_transcript else None,
        meta=meta | {"transcript_cached": heard.cached},
    )


async def _read(step: Step, deps: DocDeps | None, inp: TurnInput) -> MediaIn:
    assert inp.media is not None
    meta: dict[str, Any] = {"file_id": inp.media.file_id, "media": "document"}
    if deps is None:
        return MediaIn(reply="Sorry, I can't read documents here.", outcome="unsupported")
    refused = chatdocs.refusal(inp.media, deps.config.media.max_document_bytes)
    if refused:
        return MediaIn(reply=refused, outcome="unsupported", meta=meta)
    doc_id = chatdocs.document_id(inp.update_id)
    try:
        doc = await step.do(
            "read-document",
            chatdocs.read_document,
            deps,
            inp.media,
            doc_id,
            inp.chat_id,
            inp.user_id,
        )
    except StepFailed as exc:
        name = inp.media.file_name or "that document"
        reply = f"I couldn't read {name}: {exc.message[:300]}"
        return MediaIn(reply=reply, outcome="unsupported", meta=meta)
    can_save = deps.embedder is not None
    return MediaIn(
        notes=[chatdocs.describe(doc, can_save)],
        offer=doc if can_save else None,
        meta=meta | {"document_id": doc.doc_id, "chars": doc.total_chars},
    )


async def take_in_media(
    step: Step,
    voice_deps: VoiceDeps | None,
    doc_deps: DocDeps | None,
    config: MediaConfig,
    inp: TurnInput,
) -> MediaIn:
    """Transcribe a voice note or read a document; every failure becomes a clear reply."""
    if inp.media is None:
        return MediaIn()
    if inp.kind == "voice":
        return await _hear(step, voice_deps, config, inp)
    if inp.kind == "document":
        return await _read(step, doc_deps, inp)
    return MediaIn()


def not_taken_in(inp: TurnInput) -> str:
    """What the message carried that was not looked at, heard or read because it came over a
    [limits] limit: what is saved in its place, so history says what was there ("": nothing)."""
    marks = []
    if inp.kind == "photo" and inp.photo_file_id:
        marks.append("[photo, not looked at: over the limit]")
    if inp.media is not None and inp.media.kind == "document":
        name = inp.media.file_name or "document"
        marks.append(f"[document {name}, not read: over the limit]")
    elif inp.media is not None:
        marks.append(
            f"[{voice.LABELS.get(inp.media.kind, inp.media.kind)}, not heard: over the limit]"
        )
    if inp.reply_to and inp.reply_to.photo_file_id:
        marks.append("[the photo replied to, not looked at: over the limit]")
    return " ".join(marks)


def replace_user_content(conn: Any, message_id: int, content: str) -> None:
    """After `workflows retry`, the transcript replaces the note saved as untranscribed."""
    conn.execute(
        "UPDATE messages SET content = ? WHERE id = ? AND content != ?",
        (content, message_id, content),
    )


# -- after the answer ------------------------------------------------------------------------


async def send_one_file(
    outbox: Outbox, chat_id: int, file: SpooledFile, reply_to: int | None
) -> int:
    if not await asyncio.to_thread(os.path.isfile, file.path):
        raise NonRetryable(f"{file.filename} is no longer in the outgoing folder")
    return await outbox.send_document(
        chat_id, file.path, file.filename, caption=file.caption, reply_to=reply_to
    )


def _unlink(files: list[SpooledFile]) -> int:
    for file in files:
        Path(file.path).unlink(missing_ok=True)
    return len(files)


async def remove_spooled(files: list[SpooledFile]) -> int:
    """Sent: the outgoing folder keeps nothing (a re-run after this finds the step journaled)."""
    return await asyncio.to_thread(_unlink, files)


async def send_files(
    step: Step, outbox: Outbox, db: Database, inp: TurnInput, files: list[SpooledFile]
) -> list[int]:
    """Each file is its own step (chat/delivery.py); one that cannot be sent is reported, not
    fatal."""
    ids = []
    for n, file in enumerate(files, start=1):
        chat = inp.chat_id
        try:
            ids.append(
                await deliver(
                    step,
                    db,
                    f"send-file#{n}",
                    chat,
                    partial(send_one_file, outbox, chat, file, inp.message_id),
                    method="sendDocument",
                )
            )
        except StepFailed as exc:
            text = f"(I couldn't send {file.filename}: {exc.message[:200]})"
            ids.append(
                await deliver(
                    step, db, f"send-file-error#{n}", chat, partial(outbox.send_text, chat, text)
                )
            )
    if files:
        await step.do("clean-files", remove_spooled, files)
    return ids


async def offer_document(outbox: Outbox, db: Database, chat_id: int, doc: ReadDocument) -> int:
    """The "Add to my documents" button, unless the user already had it saved this turn."""
    query = "SELECT ingested_at FROM chat_documents WHERE id = ?"
    saved = await db.read(lambda c: c.execute(query, (doc.doc_id,)).fetchone())
    if saved is not None and saved[0] is not None:
        return 0
    return await outbox.send_text(
        chat_id, chatdocs.offer_text(doc), buttons=chatdocs.offer_buttons(doc.doc_id)
    )
