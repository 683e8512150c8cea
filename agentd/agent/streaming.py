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
from typing import Any

from agentd.chat.names import TURN_WORKFLOW
from agentd.chat.outbox import Outbox
from agentd.db import Database
from agentd.durable import store

log = logging.getLogger("agentd.agent")
# The first chunk of a turn's answer, and of its apology (turn.py `send_reply`): each names
# the answer's drafts, and takes their place.
ANSWER_STEPS = ("send#1", "send-error#1")

DRAFT_LIMIT = 4096


def draft_id(instance_id: str, step: str) -> int:
    """A stable, non-zero id per workflow and name, so a resumed call updates the same draft."""
    digest = hashlib.sha256(f"{instance_id}/{step}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2**31 - 1) + 1


def answer_draft(instance_id: str) -> int:
    """The drafts of a turn's answer: one id for all its model calls, which its answer (or the
    turn's apology) names when sent (`Outbox.send_text(draft=…)`). Where a draft is a message
    (Matrix) only that send takes its place, also after a restart."""
    return draft_id(instance_id, "answer")


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


async def end_unanswered(db: Database, outbox: Outbox, inst: store.InstanceRecord) -> None:
    """A turn that ended without its answer (cancelled, failed for good): its drafts must
    not pass for the answer (`Outbox.end_draft`). Not if the answer's send began: it may
    have taken the draft's place, which this would hide. Best effort, and harmless twice."""
    if inst.workflow != TURN_WORKFLOW or inst.status == "complete":
        return
    try:
        chat_id = json.loads(inst.input).get("chat_id")
        if not isinstance(chat_id, int) or await db.read(_answer_begun, inst.id):
            return
        await outbox.end_draft(chat_id, answer_draft(inst.id))
    except Exception as exc:
        log.info("draft not ended (best effort)", extra={"reason": type(exc).__name__})


def _answer_begun(conn: Any, instance_id: str) -> bool:
    marks = ", ".join("?" * len(ANSWER_STEPS))
    row = conn.execute(
        f"SELECT 1 FROM workflow_steps WHERE instance_id = ? AND name IN ({marks}) LIMIT 1",
        (instance_id, *ANSWER_STEPS),
    )
    return row.fetchone() is not None
