"""The chat page and its calls, added to the dashboard's application (`WebPages`), so
every request has passed the dashboard's guard: a live session, a same-origin POST and the
session's CSRF token in the form.

- `POST /chat/send` (key, text): the owner's message, committed with its turn before the
  answer; the same key again is the same message.
- `GET /chat/events?after=N` (server-sent events; a reconnect sends `Last-Event-ID`): every
  message changed after cursor N, then each new change as it happens, and what is shown while
  it lasts (typing, the answer so far). Each connection ends after `STREAM_SECONDS` and the
  browser reconnects from its cursor, so a shutdown never waits on an open page.
- `POST /chat/press` (message, data): a button of a message, pressed as the owner.
- `GET /chat/file/{id}`: a file the agent sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import jinja2
from aiohttp import web

from agentd.chat.channel import Intake
from agentd.db import open_sync
from agentd.webchat import store
from agentd.webchat.outbox import Hub, inline_type

log = logging.getLogger("agentd.webchat")
T = TypeVar("T")
HERE = Path(__file__).parent
KEY = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
STREAM_SECONDS = 50.0
PING_SECONDS = 15.0
NO_OWNER = (
    "This agent has no owner: set access.owner_id (or access.allowed_user_ids) so the page "
    "knows whose chat it is."
)


@dataclass
class ChatSite:
    """What the handlers share: set up when the channel opens, served once intake starts."""

    hub: Hub
    owner_id: int | None
    files_dir: Path
    intake: Intake | None = None
    csrf_of: Callable[[Any], str] = lambda request: ""
    templates: jinja2.Environment = field(init=False)

    def __post_init__(self) -> None:
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True
        )

    def serving(self) -> Intake:
        if self.intake is None:
            raise web.HTTPServiceUnavailable(text="The chat is starting; try again in a moment.")
        return self.intake

    def add(self, app: web.Application, csrf_of: Callable[[Any], str]) -> None:
        self.csrf_of = csrf_of
        app.router.add_get("/chat", self.page)
        app.router.add_get("/chat/chat.js", self.asset("chat.js", "text/javascript"))
        app.router.add_get("/chat/chat.css", self.asset("chat.css", "text/css"))
        app.router.add_post("/chat/send", self.send)
        app.router.add_post("/chat/press", self.press)
        app.router.add_get("/chat/events", self.events)
        app.router.add_get("/chat/file/{id:[0-9]{1,12}}", self.file)

        async def closing(app: web.Application) -> None:
            self.hub.close()  # open event streams end now, not at their deadline

        app.on_shutdown.append(closing)

    def asset(self, name: str, content_type: str) -> Callable[[web.Request], Any]:
        async def serve(request: web.Request) -> web.FileResponse:
            return web.FileResponse(HERE / "static" / name, headers={"Content-Type": content_type})

        return serve

    async def page(self, request: web.Request) -> web.Response:
        body = self.templates.get_template("chat.html").render(
            csrf=self.csrf_of(request), no_owner=NO_OWNER if self.owner_id is None else ""
        )
        return web.Response(text=body, content_type="text/html")

    async def send(self, request: web.Request) -> web.Response:
        intake = self.serving()
        form = await request.post()
        key, text = _field(form, "key"), _field(form, "text").strip()
        if not KEY.match(key):
            raise web.HTTPBadRequest(text="The message has no valid key; reload the page.")
        if not text or len(text) > store.MAX_TEXT:
            raise web.HTTPBadRequest(text=f"A message is 1 to {store.MAX_TEXT} characters.")
        if self.owner_id is None:
            raise web.HTTPConflict(text=NO_OWNER)
        posted = await intake.db.write(
            store.take_message,
            key,
            text,
            self.owner_id,
            intake.engine,
            intake.on_command,
            intake.busy,
        )
        if posted.cancel is not None:  # interrupted: already flagged, stop it now
            intake.engine.stop_flagged(posted.cancel)
        for engine_key in posted.keys:
            intake.engine.kick(engine_key)
        self.hub.poke()
        log.info("webchat message taken", extra={"id": posted.id, "again": posted.duplicate})
        return web.json_response(posted.model_dump(include={"id", "seq", "duplicate"}))

    async def press(self, request: web.Request) -> web.Response:
        intake = self.serving()
        form = await request.post()
        message, data = _field(form, "message"), _field(form, "data")
        if not message.isdecimal() or len(message) > 12 or not data or len(data) > 64:
            raise web.HTTPBadRequest(text="Not a button of this chat.")
        if self.owner_id is None:
            raise web.HTTPConflict(text=NO_OWNER)
        said = await intake.db.write(
            store.press, int(message), data, self.owner_id, intake.on_callback
        )
        if said is None:
            raise web.HTTPBadRequest(text="That message has no such button (any more).")
        await intake.engine.poll_once()  # wake the turn waiting for this answer now
        return web.json_response({"said": said})

    async def file(self, request: web.Request) -> web.FileResponse:
        intake = self.serving()
        found = await _read(intake.db.path, store.file_of, int(request.match_info["id"]))
        path = self.files_dir / found[1] if found else None
        if found is None or path is None or not path.is_file():
            raise web.HTTPNotFound(text="No such file (any more).")
        name = found[0]
        shown = inline_type(name)
        quoted = json.dumps(name.encode("ascii", "replace").decode())[1:-1]
        disposition = "inline" if shown else "attachment"
        headers = {
            "Content-Type": shown or "application/octet-stream",
            "Content-Disposition": f'{disposition}; filename="{quoted}"',
        }
        return web.FileResponse(path, headers=headers)

    async def events(self, request: web.Request) -> web.StreamResponse:
        intake = self.serving()
        cursor = _cursor(request)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
        )
        response.headers.update(_no_store())
        await response.prepare(request)
        await response.write(b"retry: 1000\n\n")  # reconnect soon after each connection ends
        deadline = time.monotonic() + STREAM_SECONDS
        # One reader for the stream's life (opening one costs ~7 ms): held while the page is.
        reader = await asyncio.to_thread(open_sync, intake.db.path, readonly=True)
        try:
            await self._stream(response, reader, cursor, deadline)
        finally:
            await asyncio.to_thread(reader.close)
        return response

    async def _stream(
        self, response: web.StreamResponse, reader: Any, cursor: int, deadline: float
    ) -> None:
        shown: dict[str, object] | None = None
        with contextlib.suppress(ConnectionResetError):
            while not self.hub.closing and time.monotonic() < deadline:
                changed = self.hub.changed()
                rows = await asyncio.to_thread(store.changes, reader, cursor)
                for row in rows:
                    cursor = row["seq"]
                    await response.write(_event("message", row, cursor))
                state = self.hub.state()
                if state != shown:
                    shown = state
                    await response.write(_event("state", state))
                if rows and cursor > 0 and len(rows) >= 200:
                    continue  # more waiting: send them before sleeping
                # Awake again when a typing window ends, so the page stops showing it.
                ends = self.hub.typing_until - time.monotonic()
                wait = min(PING_SECONDS, ends + 0.1) if ends > 0 else PING_SECONDS
                try:
                    await asyncio.wait_for(changed.wait(), wait)
                except TimeoutError:
                    await response.write(b": ping\n\n")


async def _read(path: Path, fn: Callable[..., T], *args: Any) -> T:
    """A read on a connection of its own, off the loop, as every dashboard page reads: an
    open page never holds the daemon's writer, nor its loop, for a long history."""

    def once() -> T:
        conn = open_sync(path, readonly=True)
        try:
            return fn(conn, *args)
        finally:
            conn.close()

    return await asyncio.to_thread(once)


def _field(form: Any, name: str) -> str:
    """A text field of the posted form; "" for a missing one or a file in its place."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _no_store() -> dict[str, str]:
    return {"Cache-Control": "no-store"}


def _cursor(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID") or request.query.get("after") or "0"
    return int(raw) if raw.isdecimal() and len(raw) < 16 else 0


def _event(kind: str, data: dict[str, Any], seq: int | None = None) -> bytes:
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
