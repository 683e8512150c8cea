"""Sending to Matrix: every event under a transaction id derived from its durable step.

`chat.delivery` names each send (`SEND_KEY`: instance and step); the transaction id is that
name hashed with the request's place in the step, so a re-run of the step after a kill -9
PUTs the same ids and the homeserver answers with the events it already has (Synapse keeps
them for a day, also across its restarts: docs/messages.md). A request outside any step
(typing, a best-effort notice) gets a random id: nothing depends on it arriving once.

Approval cards have no buttons on Matrix: the card lists its choices as reactions, the bot
puts each one on the card so every client shows them to click, and intake takes a served
person's reaction as the press (`matrix_buttons`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import mimetypes
import secrets
import time
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from agentd.chat.channel import Refusal
from agentd.chat.delivery import SEND_KEY, settle_send
from agentd.chat.format import Markup, to_html, to_plain
from agentd.chat.outbox import Button, SendDelayed, SendFailed
from agentd.chat.split import split_markdown
from agentd.chat.typing import typing_while
from agentd.db import Database
from agentd.matrix import ids
from agentd.matrix.classify import KEYCAPS
from agentd.matrix.client import MatrixClient, MatrixError

log = logging.getLogger("agentd.matrix")
TYPING_RENEW_SECONDS = 8.0
TYPING_DELAY = 0.3
HTML = "org.matrix.custom.html"
# The spec's recommended HTML subset ("m.room.message msgtypes": tags to permit): strike as
# <del> (its list has no <s>), a newline as <br> (HTML folds newlines), links only to http(s).
MARKUP = Markup(schemes=("https", "http"), strike="del", line_break="<br>")
# A chunk's content (plain body and HTML) stays under this many bytes of JSON: an event is at
# most 65,536 bytes (the spec's limit, signatures and ids included), and the edit that puts a
# streamed answer in its draft's place carries the content twice (`m.new_content`).
MAX_CONTENT_BYTES = 30_000
# A draft's end the homeserver could not take (each try is the client's own five retries, about
# 15 s) is tried again after these waits, about half an hour in all; past them, the next
# start's sweep ends a draft with a row.
END_WAITS = (5.0, 10.0, 20.0, 40.0, *[60.0] * 25)
# How many of the bot's newest messages in a room are read for a first draft it never wrote
# down (one page): what it sent in the room since that draft, which is little.
DRAFT_LOOKBACK = 50


def txn_id() -> str:
    key = SEND_KEY.get()
    if key is None:
        return f"agentd-{secrets.token_hex(12)}"
    return "agentd-" + hashlib.sha256(key.next().encode()).hexdigest()[:40]


def card_text(markdown: str, buttons: list[list[Button]]) -> tuple[str, list[tuple[str, str]]]:
    """The card's text with its choices as reactions; (reaction, button data) per choice."""
    flat = [b for row in buttons for b in row][: len(KEYCAPS)]
    choices = [(KEYCAPS[i], b.data) for i, b in enumerate(flat)]
    lines = [f"{KEYCAPS[i]} {b.text}" for i, b in enumerate(flat)]
    return f"{markdown}\n\nReact to answer:\n" + "\n".join(lines), choices


class MatrixOutbox:
    """Everything agentd says in a Matrix room goes through here (chat ids are local ids)."""

    def __init__(
        self,
        client: MatrixClient,
        *,
        max_message_chars: int,
        max_file_bytes: int,
        refusal: Refusal | None = None,
        end_waits: Sequence[float] = END_WAITS,
    ) -> None:
        self._client = client
        self._refusal = refusal
        self._db_bound: Database | None = None
        self._rooms: dict[int, str] = {}
        self._limit = max_message_chars
        self._max_file = max_file_bytes
        # What each open draft says now: its edits are not journaled (best effort, often).
        self._shown: dict[tuple[int, int], str] = {}
        # Drafts whose first send did not come back written down in this process: Synapse may
        # hold the message all the same, which their answer must then take the place of.
        self._unsure: set[tuple[int, int]] = set()
        # Drafts whose end is being tried again (`end_draft`), and the waits between tries.
        self._ending: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._end_waits = tuple(end_waits)

    def bind(self, db: Database) -> None:
        """The database with the id map (matrix_ids); bound before the engine runs."""
        self._db_bound = db

    @property
    def _db(self) -> Database:
        if self._db_bound is None:
            raise SendFailed("the Matrix channel is not serving yet")
        return self._db_bound

    def split(self, markdown: str) -> list[str]:
        return split_markdown(markdown, self._fits)

    def _fits(self, markdown: str) -> bool:
        if len(markdown) > self._limit:
            return False
        return len(json.dumps(text_content(markdown)).encode()) <= MAX_CONTENT_BYTES

    async def room_of(self, chat_id: int) -> str:
        # A chat's room never changes: read once per process.
        room = self._rooms.get(chat_id) or await self._db.read(ids.mxid_of, "room", chat_id)
        if room is None:
            raise SendFailed(f"chat {chat_id} is no Matrix room agentd knows")
        self._rooms[chat_id] = room
        return room

    async def _event(
        self, room_id: str, event_type: str, content: dict[str, Any], txn: str = ""
    ) -> str:
        await settle_send(idempotent=True)  # the transaction id makes a re-send the same event
        try:
            return await self._client.send(room_id, event_type, content, txn or txn_id())
        except MatrixError as exc:
            raise self._refused("message", exc) from None

    def _refused(self, what: str, exc: MatrixError) -> Exception:
        """Transient (retries spent): SendDelayed; a login the homeserver no longer takes: the
        channel's refusal (the send waits for a restart, agentd stops); else SendFailed."""
        if exc.fault.kind == "transient":
            return SendDelayed(f"the homeserver could not take the {what}: {exc}")
        if exc.fault.kind == "auth" and self._refusal is not None:
            return self._refusal.refuse()
        return SendFailed(f"the homeserver refused the {what}: {exc}")

    async def _local(self, room_id: str, event_id: str) -> int:
        return await self._db.write(ids.sent_id, event_id, room_id)

    async def _reply(self, reply_to: int | None) -> dict[str, Any]:
        if not reply_to:
            return {}
        target = await self._db.read(ids.event_of, reply_to)
        return {"m.relates_to": {"m.in_reply_to": {"event_id": target[0]}}} if target else {}

    async def send_text(
        self,
        chat_id: int,
        markdown: str,
        *,
        reply_to: int | None = None,
        buttons: list[list[Button]] | None = None,
        preview_url: str | None = None,  # Matrix clients preview on their own settings
        draft: int | None = None,
    ) -> int:
        room = await self.room_of(chat_id)
        # Only the answer its drafts were streamed for takes their place (one message): any
        # other send meanwhile is a message of its own, which the draft's edits never hide.
        found = None
        if draft is not None and not buttons:
            found = await self._db.read(_open_draft, chat_id, draft)
        if found is not None:
            key, event = found
            await self._event(room, "m.room.message", _replacing(event, markdown))
            await self._db.write(_close_draft, chat_id, key)
            self._shown.pop((chat_id, draft), None)
            return await self._local(room, event)
        if draft is not None and not buttons:
            return await self._unrecorded_drafts_place(room, chat_id, draft, markdown, reply_to)
        choices: list[tuple[str, str]] = []
        if buttons:
            markdown, choices = card_text(markdown, buttons)
        content = {**text_content(markdown), **await self._reply(reply_to)}
        event_id = await self._event(room, "m.room.message", content)
        if choices:
            await self._db.write(_save_buttons, event_id, choices)
            for key, _ in choices:  # so every client shows the choices, ready to click
                relates = {"rel_type": "m.annotation", "event_id": event_id, "key": key}
                await self._event(room, "m.reaction", {"m.relates_to": relates})
        return await self._local(room, event_id)

    async def _unrecorded_drafts_place(
        self, room: str, chat_id: int, draft: int, markdown: str, reply_to: int | None
    ) -> int:
        """An answer whose drafts have no row, sent under its first draft's transaction id:
        a first draft Synapse took before agentd wrote its id down (agentd died in between,
        or the reply was lost) is handed back then, not doubled by a message of its own, and
        the answer is its edit. Only a send that can follow such a draft (its turn resumed
        after a restart, or that draft unsure in this process) reads the event it got back;
        otherwise the send made it, as a first run without drafts always does."""
        content = {**text_content(markdown), **await self._reply(reply_to)}
        event_id = await self._event(room, "m.room.message", content, _draft_txn(chat_id, draft))
        key = SEND_KEY.get()
        if (key is not None and key.resumed) or (chat_id, draft) in self._unsure:
            if not await self._shows(room, event_id, content):
                await self._event(room, "m.room.message", _replacing(event_id, markdown))
        self._unsure.discard((chat_id, draft))
        self._shown.pop((chat_id, draft), None)
        return await self._local(room, event_id)

    async def _shows(self, room: str, event_id: str, content: dict[str, Any]) -> bool:
        """Whether the event shows `content` (its text, never edited since): the message a
        send just made does; a draft handed back under the same transaction id does not."""
        try:
            event = await self._client.event(room, event_id)
        except MatrixError as exc:
            raise self._refused("message", exc) from None
        held = event.get("content") if isinstance(event.get("content"), dict) else {}
        unsigned = event.get("unsigned") if isinstance(event.get("unsigned"), dict) else {}
        relations = unsigned.get("m.relations") if isinstance(unsigned, dict) else None
        edited = isinstance(relations, dict) and "m.replace" in relations
        same = all(held.get(k) == content.get(k) for k in ("body", "formatted_body"))
        return same and not edited

    async def edit_text(
        self,
        chat_id: int,
        message_id: int,
        markdown: str,
        *,
        buttons: list[list[Button]] | None = None,
    ) -> None:
        """Replace the text of a message (`m.replace`); a card's choices end with its edit."""
        room = await self.room_of(chat_id)
        target = await self._db.read(ids.event_of, message_id)
        if target is None:
            raise SendFailed(f"message {message_id} is no Matrix event agentd sent")
        if not buttons:
            await self._db.write(_drop_buttons, target[0])
        await self._event(room, "m.room.message", _replacing(target[0], markdown))

    async def send_document(
        self,
        chat_id: int,
        path: str,
        filename: str,
        *,
        caption: str = "",
        reply_to: int | None = None,
    ) -> int:
        """Upload the file, then post it (an image as m.image); bounded by max_file_bytes."""
        room = await self.room_of(chat_id)
        data = await asyncio.to_thread(_read_bounded, path, self._max_file)
        mime = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        try:
            url = await self._client.upload(data, mime, filename)
        except MatrixError as exc:
            raise self._refused("file", exc) from None
        content = {
            "msgtype": "m.image" if mime.startswith("image/") else "m.file",
            "body": caption or filename,
            "filename": filename,
            "url": url,
            "info": {"mimetype": mime, "size": len(data)},
            **await self._reply(reply_to),
        }
        return await self._local(room, await self._event(room, "m.room.message", content))

    async def answer_callback(self, callback_id: str, text: str, *, alert: bool = False) -> None:
        """Matrix has no toast for a reaction: the card's edit is the answer."""

    async def send_draft(
        self, chat_id: int, draft_id: int, text: str, *, reply_to: int | None = None
    ) -> bool:
        """The answer so far, as one message edited as it grows; the answer replaces it when
        sent (`send_text` with `draft=draft_id`), so the draft is the reply to `reply_to` (an
        edit cannot add one). Its first send's transaction id comes from the draft's id (the
        answer's), so a turn resumed after a crash finds the same message. Best effort: False
        ends the drafts of this answer."""
        try:
            room = await self.room_of(chat_id)
            found = await self._db.read(_open_draft, chat_id, draft_id)
            if found is None:
                content = {**text_content(text), **await self._reply(reply_to)}
                self._unsure.add((chat_id, draft_id))  # until its event id is written down
                self._shown[(chat_id, draft_id)] = text  # what it says if Synapse took it
                txn = _draft_txn(chat_id, draft_id)
                draft = await self._client.send(room, "m.room.message", content, txn)
                await self._db.write(_save_draft, chat_id, draft_id, draft)
                self._unsure.discard((chat_id, draft_id))
            else:
                edit = _replacing(found[1], text)
                await self._client.send(room, "m.room.message", edit, txn_id())
            self._shown[(chat_id, draft_id)] = text
        except Exception as exc:  # cancellation is BaseException and still propagates
            log.info("matrix draft skipped (best effort)", extra={"reason": type(exc).__name__})
            return False
        return True

    async def end_draft(
        self, chat_id: int, draft_id: int, note: str, *, earlier: bool = False
    ) -> None:
        """The draft ends as what it said and `note`. What it said, if this process never saw
        it (it was sent before a restart, or found in the room), is read back from the
        homeserver: one read of the event, or the event the scan below found; `note` alone if
        that fails. Under a transaction id from the draft's,
        so doing it again after a crash is the same edit; best effort. Its row goes once the
        homeserver took the edit, or refused it for good (the bot left the room, say). One
        the homeserver could not take now is tried again in this process (`END_WAITS`), and
        its row stays meanwhile, for the next start to end if this process cannot.

        A draft with no row may still be in the room, if its first send went out and its
        event id was never written down: when this process was unsure of that send, or
        `earlier` (the turn began before this process), the bot's newest messages in the
        room are read for the one sent under the first draft's transaction id, and it is
        ended. Nothing is sent when none is found."""
        key = (chat_id, draft_id)
        text = self._shown.pop(key, "")
        look = earlier or key in self._unsure
        self._unsure.discard(key)
        if key in self._ending:  # already being tried again: the same edit
            return
        if await self._end(chat_id, draft_id, text, note, look):
            return
        task = asyncio.create_task(self._end_later(chat_id, draft_id, text, note, look))
        self._ending[key] = task
        task.add_done_callback(lambda _: self._ending.pop(key, None))

    async def _end(self, chat_id: int, draft_id: int, text: str, note: str, look: bool) -> bool:
        """One try at ending the draft as `text` and `note`; False when the homeserver could
        not take it now (worth trying again), True when it is done or nothing is left to do."""
        try:
            found = await self._db.read(_open_draft, chat_id, draft_id)
            if found is not None and found[0] != draft_id:  # another answer's (key 0)
                return True
            room = await self.room_of(chat_id)
            event, scanned = (found[1], None) if found else (None, None)
            if event is None and look:
                scanned = await self._unrecorded_draft(room, chat_id, draft_id)
                event = str((scanned or {}).get("event_id") or "") or None
            if event is None:
                return True
            try:
                if text.strip():
                    edit = _replacing(event, f"{text}\n\n{note}")
                else:
                    edit = _stopped(event, await self._said(room, event, scanned), note)
                await self._client.send(room, "m.room.message", edit, _stop_txn(chat_id, draft_id))
            except MatrixError as exc:
                if exc.fault.kind != "permanent":
                    raise
                log.warning("matrix draft cannot be ended", extra={"reason": exc.fault.reason})
            if found is not None:
                await self._db.write(_close_draft, chat_id, draft_id)
        except MatrixError as exc:
            if exc.fault.kind == "transient":
                log.info("matrix draft not ended yet", extra={"reason": exc.fault.reason})
                return False
            log.info("matrix draft not ended (best effort)", extra={"reason": exc.fault.reason})
        except Exception as exc:  # cancellation is BaseException and still propagates
            log.info("matrix draft not ended (best effort)", extra={"reason": type(exc).__name__})
        return True

    async def _end_later(
        self, chat_id: int, draft_id: int, text: str, note: str, look: bool
    ) -> None:
        for wait in self._end_waits:
            await asyncio.sleep(wait)
            if await self._end(chat_id, draft_id, text, note, look):
                return
        log.warning("matrix draft not ended; the next start tries again if it has a row")

    async def _said(
        self, room: str, event_id: str, scanned: dict[str, Any] | None
    ) -> dict[str, Any]:
        """What a draft this process never saw says, as the homeserver holds it: the event the
        scan found, or one read of it (only on these rare paths); {} if it cannot be read, so
        the draft still ends, as the marker alone."""
        try:
            event = scanned if scanned is not None else await self._client.event(room, event_id)
        except Exception as exc:  # cancellation is BaseException and still propagates
            log.info("matrix draft not read (best effort)", extra={"reason": type(exc).__name__})
            return {}
        return _newest_content(event)

    async def _unrecorded_draft(
        self, room: str, chat_id: int, draft_id: int
    ) -> dict[str, Any] | None:
        """The event of the answer's first draft, found among the bot's newest messages in
        the room by its transaction id (which Synapse shows the device that sent it); None if
        no such message is there. A draft with no row has no edits, so the messages after
        it are the few anything else sent in the room since (a command's reply, a notice)."""
        txn = _draft_txn(chat_id, draft_id)
        for event in await self._client.own_messages(room, DRAFT_LOOKBACK):
            unsigned = event.get("unsigned")
            if isinstance(unsigned, dict) and unsigned.get("transaction_id") == txn:
                return event
        return None

    async def close(self) -> None:
        """Stop trying again to end drafts: their rows stay, for the next start."""
        tasks = list(self._ending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def open_drafts(self) -> list[tuple[int, int]]:
        """The drafts with a row (neither replaced nor ended), but one opened before drafts
        were their answer's (id 0): the chat's next answer takes its place."""
        try:
            return await self._db.read(_drafts_left)
        except Exception as exc:  # cancellation is BaseException and still propagates
            log.info("matrix drafts not read (best effort)", extra={"reason": type(exc).__name__})
            return []

    async def chat_action(self, chat_id: int) -> None:
        with contextlib.suppress(Exception):
            await self._client.typing(await self.room_of(chat_id), True)

    def typing(self, chat_id: int) -> contextlib.AbstractAsyncContextManager[None]:
        """ "typing…" while the body runs, once it has run TYPING_DELAY."""

        async def clear() -> None:
            with contextlib.suppress(Exception):
                await self._client.typing(await self.room_of(chat_id), False)

        return typing_while(
            lambda: self.chat_action(chat_id),
            every=TYPING_RENEW_SECONDS,
            delay=TYPING_DELAY,
            clear=clear,
        )


def text_content(markdown: str) -> dict[str, Any]:
    """A text message: the answer as HTML in the spec's subset, and as plain text in `body`
    (what a client without HTML shows, and what notifications and search read)."""
    return {
        "msgtype": "m.text",
        "body": to_plain(markdown),
        "format": HTML,
        "formatted_body": to_html(markdown, MARKUP),
    }


def _draft_txn(chat_id: int, draft_id: int) -> str:
    """The transaction id of an answer's first draft, from the draft's id (the answer's): the
    same in every process, so whatever sends it again is handed the same message."""
    return ("agentd-draft-" + hashlib.sha256(f"{chat_id}/{draft_id}".encode()).hexdigest())[:60]


def _stop_txn(chat_id: int, draft_id: int) -> str:
    """The transaction id of the edit that ends an answer's draft stopped: one per draft, so
    ending it again (a retry, a restart) is the same edit."""
    return ("agentd-stop-" + hashlib.sha256(f"{chat_id}/{draft_id}".encode()).hexdigest())[:60]


def _replacing(event_id: str, markdown: str) -> dict[str, Any]:
    """An edit (`m.replace`) of one of the bot's messages to `markdown`; the "* " fallback is
    what a client that does not know edits shows."""
    return _edit(event_id, text_content(markdown))


def _edit(event_id: str, new: dict[str, Any]) -> dict[str, Any]:
    """An edit of `event_id` to the content `new`, with its "* " fallback."""
    return {
        **new,
        "body": f"* {new['body']}",
        "formatted_body": f"* {new['formatted_body']}",
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
    }


def _newest_content(event: dict[str, Any]) -> dict[str, Any]:
    """What a message shows: its newest edit's `m.new_content` (which the server bundles under
    `unsigned` → `m.relations` → `m.replace`), else its own content."""
    unsigned = event.get("unsigned")
    relations = unsigned.get("m.relations") if isinstance(unsigned, dict) else None
    edit = relations.get("m.replace") if isinstance(relations, dict) else None
    edited = edit.get("content") if isinstance(edit, dict) else None
    new = edited.get("m.new_content") if isinstance(edited, dict) else None
    if isinstance(new, dict):
        return new
    content = event.get("content")
    return content if isinstance(content, dict) else {}


def _stopped(event_id: str, said: dict[str, Any], note: str) -> dict[str, Any]:
    """An edit ending a draft as what it `said` (a message content as the homeserver holds
    it: plain `body`, HTML `formatted_body`, both already rendered) and `note` (Markdown).
    Each form gets the note appended as is, so nothing is rendered or escaped twice; the
    note alone when the draft said nothing readable."""
    body = said.get("body")
    if not isinstance(body, str) or not body.strip():
        return _replacing(event_id, note)
    marker = text_content(note)
    html = said.get("formatted_body")
    if said.get("format") != HTML or not isinstance(html, str):
        html = escape(body).replace("\n", "<br>")  # plain text, shown as it reads
    new = {
        "msgtype": "m.text",
        "body": f"{body}\n\n{marker['body']}",
        "format": HTML,
        "formatted_body": f"{html}<br><br>{marker['formatted_body']}",
    }
    return _edit(event_id, new)


def _open_draft(conn: Any, chat_id: int, draft_id: int) -> tuple[int, str] | None:
    """The answer's open draft (its key, its event); else one the chat had open when drafts
    became their answer's (key 0, schema.py), which the chat's next answer takes over."""
    row = conn.execute(
        "SELECT draft_id, event_id FROM matrix_drafts WHERE chat_id = ? AND draft_id IN (?, 0) "
        "ORDER BY draft_id DESC LIMIT 1",
        (chat_id, draft_id),
    )
    found = row.fetchone()
    return None if found is None else (int(found[0]), str(found[1]))


def _drafts_left(conn: Any) -> list[tuple[int, int]]:
    rows = conn.execute("SELECT chat_id, draft_id FROM matrix_drafts WHERE draft_id != 0")
    return [(int(chat), int(draft)) for chat, draft in rows]


def _save_draft(conn: Any, chat_id: int, draft_id: int, event_id: str) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO matrix_drafts (chat_id, draft_id, event_id) VALUES (?, ?, ?)",
        (chat_id, draft_id, event_id),
    )


def _close_draft(conn: Any, chat_id: int, draft_id: int) -> None:
    conn.execute(
        "DELETE FROM matrix_drafts WHERE chat_id = ? AND draft_id = ?", (chat_id, draft_id)
    )


def _read_bounded(path: str, limit: int) -> bytes:
    with Path(path).open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise SendFailed(f"the file is over matrix.max_file_bytes ({limit} bytes)")
    return data


def _save_buttons(conn: Any, event_id: str, choices: list[tuple[str, str]]) -> None:
    now = time.time()
    conn.executemany(
        "INSERT OR IGNORE INTO matrix_buttons (event_id, reaction, data, made_at) "
        "VALUES (?, ?, ?, ?)",
        [(event_id, key, data, now) for key, data in choices],
    )


def _drop_buttons(conn: Any, event_id: str) -> None:
    conn.execute("DELETE FROM matrix_buttons WHERE event_id = ?", (event_id,))


class MatrixFiles:
    """Files users send: `mxc://` URIs, read no further than the caller's bound."""

    def __init__(self, client: MatrixClient) -> None:
        self._client = client

    def handles(self, file_id: str) -> bool:
        return file_id.startswith("mxc://")

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        from agentd.durable import NonRetryable

        try:
            return await self._client.download(file_id, max_bytes)
        except MatrixError as exc:
            if exc.fault.kind == "transient":
                raise
            raise NonRetryable(f"the homeserver would not give the file: {exc}") from None
