"""Streaming answers as Telegram drafts (R-TG-3): throttled, best effort, never journaled.

Drafts are ephemeral previews; the final answer is still sent once by the turn's send steps,
so a crash mid-stream only means the next attempt streams again — never a duplicate message.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from agentd.chat import locale
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import store

log = logging.getLogger("agentd.agent")
# The first chunk of a turn's answer, and of its apology (turn.py `send_reply`): each names
# the answer's drafts, and takes their place.
ANSWER_STEPS = ("send#1", "send-error#1")

DRAFT_LIMIT = 4096
# What a draft whose answer will not come ends with where it stays (Matrix), so nobody takes
# it for the answer: in its user's language (chat/locale.py `worded`).
STOPPED = {
    "en": "_(stopped: this answer was not finished)_",
    "de": "_(abgebrochen: diese Antwort ist nicht fertig geworden)_",
    "es": "_(detenido: esta respuesta no se terminó)_",
    "fr": "_(interrompu : cette réponse n'a pas été terminée)_",
    "it": "_(interrotto: questa risposta non è stata finita)_",
    "nl": "_(gestopt: dit antwoord is niet afgemaakt)_",
    "pl": "_(przerwano: ta odpowiedź nie została dokończona)_",
    "pt": "_(interrompido: esta resposta não foi terminada)_",
    "ru": "_(остановлено: этот ответ не был закончен)_",
    "uk": "_(зупинено: цю відповідь не було завершено)_",
    "ja": "_(停止: この回答は完成していません)_",
    "zh": "_(已停止：此回答未完成)_",
}


def draft_id(instance_id: str, step: str) -> int:
    """A stable, non-zero id per workflow and name, so a resumed call updates the same draft."""
    digest = hashlib.sha256(f"{instance_id}/{step}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2**31 - 1) + 1


def answer_draft(instance_id: str, retries: int = 0) -> int:
    """The drafts of a turn's answer: one id for all its model calls, which its answer (or the
    turn's apology) names when sent (`Outbox.send_text(draft=…)`). Where a draft is a message
    (Matrix) only that send takes its place, also after a restart. Each run the owner's retry
    begins (`retries`, the instance's) has drafts of its own: the earlier run's were ended
    stopped, under ids the homeserver deduplicates for a day, and a new run reusing them would
    land on the stopped message. A never-retried turn keeps the id it always had."""
    return draft_id(instance_id, "answer" if retries == 0 else f"answer/retry{retries}")


class DraftStreamer:
    """Called with the text written so far; sends it as a draft at most every `interval`.

    No draft goes out before `delay` has passed since it was made: a quick answer needs none."""

    def __init__(
        self,
        outbox: Outbox,
        chat_id: int,
        draft: int,
        interval: float,
        monotonic: Callable[[], float] = time.monotonic,
        delay: float = 0.0,
        reply_to: int | None = None,
    ) -> None:
        self._outbox = outbox
        self._chat_id = chat_id
        self._draft = draft
        self._reply_to = reply_to  # the message the answer replies to, and so its draft
        self._interval = interval
        self._monotonic = monotonic
        self._not_before = monotonic() + delay
        self._last = float("-inf")
        self._shown = ""
        self.enabled = True
        self.sent = 0

    async def __call__(self, text: str) -> None:
        if not self.enabled or not text.strip() or text == self._shown:
            return
        now = self._monotonic()
        if now < self._not_before or now - self._last < self._interval:
            return
        self._last = now
        self._shown = text
        preview = text if len(text) <= DRAFT_LIMIT else text[: DRAFT_LIMIT - 1] + "…"
        self.enabled = await self._outbox.send_draft(
            self._chat_id, self._draft, preview, reply_to=self._reply_to
        )
        self.sent += self.enabled


async def end_unanswered(
    db: Database, outbox: Outbox, inst: store.InstanceRecord, *, started_at: float = 0.0
) -> bool:
    """A turn that ended without its answer (cancelled, failed for good): its drafts must
    not pass for the answer (`Outbox.end_draft`), marked stopped in its user's language. Not
    if the answer's send began: it may have taken the draft's place, which this would hide.
    A turn made before `started_at` (when this process began) may have a draft an earlier
    process sent and never wrote down, which the outbox then looks for. Best effort, and
    harmless twice; whether the outbox was asked to end them."""
    if inst.workflow != TURN_WORKFLOW or inst.status == "complete":
        return False
    try:
        given = json.loads(inst.input)
        chat_id, user_id = given.get("chat_id"), given.get("user_id")
        if not isinstance(chat_id, int) or await db.read(_answer_begun, inst.id):
            return False
        told = str(given.get("language_code") or "")
        draft = answer_draft(inst.id, inst.retries)
        note = await _stopped_note(db, user_id, told)
        await outbox.end_draft(chat_id, draft, note, earlier=inst.created_at < started_at)
    except Exception as exc:
        log.info("draft not ended (best effort)", extra={"reason": type(exc).__name__})
        return False
    return True


async def end_left_drafts(db: Database, outbox: Outbox) -> int:
    """At start, before the engine runs: the drafts whose turn ended without its answer and
    were not ended then (the process died between the turn's end and its draft's, or the
    homeserver was down, and the engine's hook for it never runs again) are ended now, as
    the hook would have. So is one no turn names any more (`draft_fate`). Each ends under
    its own fixed transaction id, so one the homeserver took already is the same edit again;
    one not ended now (the homeserver still down) keeps its row, which retention leaves
    (matrix/kept.py), for the next start. Returns how many the outbox was asked to end."""
    ended = 0
    for chat_id, draft in await outbox.open_drafts():
        inst = await db.read(_turn_of_draft, chat_id, draft)
        if inst is None:
            ended += await _end_nameless(db, outbox, chat_id, draft)
        elif inst.status not in store.OPEN_STATUSES:
            ended += await end_unanswered(db, outbox, inst)
    return ended


DraftFate = Literal["streaming", "unanswered", "answered"]


def draft_fate(conn: Any, chat_id: int, draft: int) -> DraftFate:
    """What a draft left with its row waits for. `streaming`: its turn is open, and its answer
    may still take its place. `answered`: its turn completed, or its answer's send began
    (which may have taken the draft's place): nothing ends it, and retention drops its row.
    `unanswered`: its turn ended without the answer, or no turn names it any more (retention
    removed the turn, or the owner's retry gave the turn drafts of their own): it is to be
    marked stopped (`end_left_drafts`), and its row stays until it is."""
    inst = _turn_of_draft(conn, chat_id, draft)
    if inst is None:
        return "unanswered"
    if inst.status in store.OPEN_STATUSES:
        return "streaming"
    if inst.status == "complete" or _answer_begun(conn, inst.id):
        return "answered"
    return "unanswered"


async def _end_nameless(db: Database, outbox: Outbox, chat_id: int, draft: int) -> bool:
    """A draft no turn names any more: no answer will take its place. Marked stopped in the
    language of the chat's latest turn's user (drafts are private chats')."""
    try:
        user_id, told = await db.read(_chat_user, chat_id)
        await outbox.end_draft(chat_id, draft, await _stopped_note(db, user_id, told))
    except Exception as exc:
        log.info("draft not ended (best effort)", extra={"reason": type(exc).__name__})
        return False
    return True


async def _stopped_note(db: Database, user_id: Any, told: str) -> str:
    language = await db.read(locale.of_user, user_id, told) if user_id else told
    return locale.worded(STOPPED, language)


def _chat_user(conn: Any, chat_id: int) -> tuple[int | None, str]:
    row = conn.execute(
        "SELECT input FROM workflow_instances WHERE key = ? AND workflow = ? "
        "ORDER BY seq DESC LIMIT 1",
        (chat_key(chat_id), TURN_WORKFLOW),
    ).fetchone()
    given = json.loads(row[0]) if row else {}
    user_id = given.get("user_id")
    return (user_id if isinstance(user_id, int) else None), str(given.get("language_code") or "")


def _turn_of_draft(conn: Any, chat_id: int, draft: int) -> store.InstanceRecord | None:
    """The chat's turn whose answer's drafts are `draft` (only their hash names them: a scan
    of the chat's turns, made only for a draft left open at a start)."""
    rows = conn.execute(
        "SELECT id, retries FROM workflow_instances WHERE key = ? AND workflow = ?",
        (chat_key(chat_id), TURN_WORKFLOW),
    )
    for instance_id, retries in rows.fetchall():
        if answer_draft(instance_id, retries) == draft:
            return store.get_instance(conn, instance_id)
    return None


def _answer_begun(conn: Any, instance_id: str) -> bool:
    marks = ", ".join("?" * len(ANSWER_STEPS))
    row = conn.execute(
        f"SELECT 1 FROM workflow_steps WHERE instance_id = ? AND name IN ({marks}) LIMIT 1",
        (instance_id, *ANSWER_STEPS),
    )
    return row.fetchone() is not None
