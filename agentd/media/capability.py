"""The media capability: photos (vision), voice notes (transcription) and documents sent in
chat (read, and kept on request), with the "doc:" buttons that add one."""

from __future__ import annotations

import logging

from agentd.config import Config
from agentd.tools.capability import Context, Contribution, Simple

log = logging.getLogger("agentd")


def _secrets(config: Config) -> list[str]:
    media = config.media
    return [media.transcription_key_env] if media.transcription == "openai" else []


async def _build(ctx: Context) -> Contribution:
    from agentd.media.chatdocs import (
        DocDeps,
        chat_document_tools,
        document_callbacks,
        make_ingest_workflow,
    )
    from agentd.media.transcribe import build_transcriber
    from agentd.media.vision import VisionDeps
    from agentd.media.voice import VoiceDeps

    config, files = ctx.config, ctx.shared["files"]
    docs = DocDeps(config=config, db=ctx.db, files=files, embedder=ctx.shared["embedder"])
    transcriber, problem = build_transcriber(config.media, ctx.secrets)
    if problem:
        log.warning("media problem", extra={"problem": problem})
    voice = None
    if transcriber is not None:
        ctx.stack.push_async_callback(transcriber.aclose)
        voice = VoiceDeps(config=config.media, db=ctx.db, files=files, transcriber=transcriber)
    vision = None
    if config.vision.enabled:
        vision = VisionDeps(
            config=config.vision, limits=config.limits, db=ctx.db, llm=ctx.llm, files=files
        )
    return Contribution(
        tools=chat_document_tools(docs),
        workflows=[make_ingest_workflow(docs, ctx.outbox)],
        turn={"docs": docs, "vision": vision, "voice": voice},
        on_callback=lambda fallback: document_callbacks(ctx.engine, fallback),
        about="read the files, voice messages and pictures you send me",
    )


def capability() -> Simple:
    return Simple("media", build=_build, secrets=_secrets)
