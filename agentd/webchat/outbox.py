"""What the agent says on the page: stored rows (answers, cards, files) and what is only shown
while it lasts (typing, the answer so far), with one `Hub` the open pages wait on.

Every stored send is keyed by its durable step (`chat.delivery.SEND_KEY`), so a re-run of the
step after a kill -9 finds the row it wrote and sends nothing new: on this channel a re-send is
the same message, as on Matrix, and nothing is counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import mimetypes
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from agentd.chat.delivery import SEND_KEY, settle_send
from agentd.chat.outbox import Button, SendFailed
from agentd.chat.split import split_markdown
from agentd.db import Database
from agentd.webchat import store
from agentd.webchat.ids import CHAT_ID

MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_CHUNK = 32_000
TYPING_SECONDS = 6.0  # how long one `chat_action` shows "typing…"
# Shown inline on the page; anything else is a download (an SVG or HTML file never renders).
INLINE_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class Hub:
    """Tells the open pages that something changed. State of this process only: what it holds
    (typing, the answer so far) is shown while it lasts and never needed after a restart."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()
        self.closing = False
        self.typing = 0  # sends under way that show "typing…"
        self.typing_until = 0.0
        self.draft = ""
        self.draft_id = 0  # whose answer `draft` is (agent/streaming.py `answer_draft`)

    def poke(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def changed(self) -> asyncio.Event:
        """The event the next change sets: take it before reading, wait on it after."""
        return self._changed

    def close(self) -> None:
        self.closing = True
        self.poke()

    def state(self) -> dict[str, object]:
        typing = self.typing > 0 or time.monotonic() < self.typing_until
        return {"typing": typing, "draft": self.draft}


def split_text(text: str, limit: int = MAX_CHUNK) -> list[str]:
    """Chunks of at most `limit` characters, by the one splitter every channel uses (code
    blocks closed in each chunk)."""
    return split_markdown(text, lambda chunk: len(chunk) <= limit) or [""]


def _buttons(buttons: list[list[Button]] | None) -> str:
    return json.dumps([[b.model_dump() for b in row] for row in buttons or []])


def keep_file(path: str, directory: Path) -> str:
    """Copy a file to be sent into the chat's own folder, under its hash (owner-only): the
    page links to it for as long as the message is there."""
    with Path(path).open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise SendFailed(f"the file is over {MAX_FILE_BYTES} bytes")
    digest = hashlib.sha256(data).hexdigest()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / digest
    if target.exists():
        os.utime(target)  # kept again: the daily prune leaves a file touched since its cutoff
    else:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".part-")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    return digest


def inline_type(file_name: str) -> str | None:
    mime = mimetypes.guess_type(file_name)[0]
    return mime if mime in INLINE_IMAGES else None


class WebOutbox:
    """The page's side of `chat.outbox.Outbox`: one chat, the owner's."""

    def __init__(self, hub: Hub, files_dir: Path) -> None:
        self.hub = hub
        self.files_dir = files_dir
        self._db_bound: Database | None = None

    def bind(self, db: Database) -> None:
        self._db_bound = db

    def _db(self, chat_id: int) -> Database:
        if chat_id != CHAT_ID:
            raise SendFailed(f"chat {chat_id} is not the web chat")
        if self._db_bound is None:
            raise SendFailed("the web chat is not serving yet")
        return self._db_bound

    def split(self, markdown: str) -> list[str]:
        return split_text(markdown)

    async def _put(self, db: Database, text: str, **extra: object) -> int:
        await settle_send(idempotent=True)  # the step's key makes a re-send the same row
        key = SEND_KEY.get()
        message_id = await db.write(
            store.put_answer, key.next() if key is not None else None, text, **extra
        )
        self.hub.poke()
        return message_id

    async def send_text(
        self,
        chat_id: int,
        markdown: str,
        *,
        reply_to: int | None = None,
        buttons: list[list[Button]] | None = None,
        preview_url: str | None = None,  # the page shows no previews: nothing is fetched
        draft: int | None = None,
    ) -> int:
        db = self._db(chat_id)
        if draft is not None:  # the answer takes the place of the answer so far
            self.hub.draft = ""
        return await self._put(db, markdown, buttons=_buttons(buttons), reply_to=reply_to)

    async def edit_text(
        self,
        chat_id: int,
        message_id: int,
        markdown: str,
        *,
        buttons: list[list[Button]] | None = None,
    ) -> None:
        db = self._db(chat_id)
        if not await db.write(store.edit_answer, message_id, markdown, _buttons(buttons)):
            raise SendFailed(f"message {message_id} is no message of the agent's on the page")
        self.hub.poke()

    async def send_document(
        self,
        chat_id: int,
        path: str,
        filename: str,
        *,
        caption: str = "",
        reply_to: int | None = None,
    ) -> int:
        db = self._db(chat_id)
        try:
            digest = await asyncio.to_thread(keep_file, path, self.files_dir)
        except OSError as exc:
            raise SendFailed(f"the file to send cannot be read: {type(exc).__name__}") from None
        return await self._put(
            db, caption, reply_to=reply_to, file_name=filename, file_sha256=digest
        )

    async def answer_callback(self, callback_id: str, text: str, *, alert: bool = False) -> None:
        """The press's answer goes back with the page's request (webchat/pages.py)."""

    async def send_draft(
        self, chat_id: int, draft_id: int, text: str, *, reply_to: int | None = None
    ) -> bool:
        if chat_id != CHAT_ID:
            return False
        self.hub.draft, self.hub.draft_id = text, draft_id
        self.hub.poke()
        return True

    async def end_draft(
        self, chat_id: int, draft_id: int, note: str, *, earlier: bool = False
    ) -> None:
        """The answer so far of an answer that will not come goes (another's stays)."""
        if chat_id == CHAT_ID and self.hub.draft_id == draft_id and self.hub.draft:
            self.hub.draft = ""
            self.hub.poke()

    async def open_drafts(self) -> list[tuple[int, int]]:
        """The answer so far lives in this process only: gone with it."""
        return []

    async def chat_action(self, chat_id: int) -> None:
        if chat_id == CHAT_ID:
            self.hub.typing_until = time.monotonic() + TYPING_SECONDS
            self.hub.poke()

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: int) -> AsyncIterator[None]:
        if chat_id != CHAT_ID:
            yield
            return
        self.hub.typing += 1
        self.hub.poke()
        try:
            yield
        finally:
            self.hub.typing -= 1
            self.hub.poke()
