"""The Client-Server API through mautrix: the only module that imports it.

What agentd needs of Matrix is small (sync, send with its own transaction id, media, join,
leave), so this wraps mautrix's typed request layer and keeps everything else as the JSON the
server sent: intake classifies plain dicts, like Telegram's.

Retries are done here, not by mautrix (whose back-off starts at 4 s and ignores 429): a send
is retried with the same transaction id, which the homeserver deduplicates, so a retry can
never show the message twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

import aiohttp
from mautrix.api import HTTPAPI, Method, Path
from mautrix.client.api import ClientAPI
from mautrix.errors import MatrixConnectionError, MatrixRequestError
from mautrix.types import EventID, EventType, LoginType, RoomID, UserID
from pydantic import BaseModel

from agentd.net.bodies import read_at_most

log = logging.getLogger("agentd.matrix")
T = TypeVar("T")
MAX_RETRY_WAIT = 30.0


class MatrixFault(BaseModel):
    """What a failed request means: try again (and when), or never."""

    kind: Literal["transient", "permanent", "auth"]
    reason: str
    retry_after: float | None = None


class MatrixError(Exception):
    """A request failed for good (or its retries ran out); the text is safe to log."""

    def __init__(self, fault: MatrixFault) -> None:
        super().__init__(fault.reason)
        self.fault = fault


def classify_fault(exc: BaseException) -> MatrixFault:
    """A failure in words that hold no token, room content or URL query."""
    if isinstance(exc, MatrixError):
        return exc.fault
    if isinstance(exc, MatrixRequestError):
        status, code = exc.http_status, getattr(exc, "errcode", "") or ""
        reason = f"HTTP {status} {code}".strip()
        if status == 401 or code in ("M_UNKNOWN_TOKEN", "M_MISSING_TOKEN"):
            return MatrixFault(kind="auth", reason=reason)
        if status == 429:
            ms = (getattr(exc, "retry_after_ms", None) or 0) / 1000
            return MatrixFault(kind="transient", reason=reason, retry_after=ms or None)
        if status >= 500 or status in (408, 0):
            return MatrixFault(kind="transient", reason=reason)
        return MatrixFault(kind="permanent", reason=reason)
    if isinstance(exc, (MatrixConnectionError, aiohttp.ClientError, TimeoutError, OSError)):
        return MatrixFault(kind="transient", reason=type(exc).__name__)
    return MatrixFault(kind="permanent", reason=type(exc).__name__)


class MatrixClient:
    """One logged-in device of the bot's account."""

    def __init__(
        self,
        homeserver: str,
        user_id: str,
        *,
        request_timeout: float = 20.0,
        retries: int = 5,
        base_delay: float = 0.5,
    ) -> None:
        self._session = aiohttp.ClientSession()
        self._http = HTTPAPI(homeserver, client_session=self._session, default_retry_count=0)
        self.api = ClientAPI(UserID(user_id), api=self._http)
        self.user_id = user_id
        self.device_id = ""
        self._timeout = request_timeout
        self._retries = retries
        self._base_delay = base_delay

    @property
    def access_token(self) -> str:
        """The token requests carry: the configured one, or the one a password login got."""
        return str(self._http.token or "")

    async def close(self) -> None:
        await self._session.close()

    async def _call(self, what: str, call: Callable[[], Awaitable[T]], timeout: float) -> T:
        """One request with agentd's retry policy; MatrixError when it fails for good."""
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(timeout):
                    return await call()
            except Exception as exc:
                fault = classify_fault(exc)
                if fault.kind != "transient" or attempt >= self._retries:
                    raise MatrixError(fault) from None
                attempt += 1
                wait = min(
                    fault.retry_after or self._base_delay * 2 ** (attempt - 1), MAX_RETRY_WAIT
                )
                log.warning(
                    "matrix request failed, retrying",
                    extra={"method": what, "reason": fault.reason, "attempt": attempt},
                )
                await asyncio.sleep(wait)

    async def log_in(self, *, token: str = "", password: str = "", device_id: str = "") -> str:
        """Use the access token, or log in with the password on `device_id` (kept by the
        caller, so each start is the same device); return the device id."""
        if token:
            self._http.token = token
            who = await self._call("whoami", self.api.whoami, self._timeout)
            if who.user_id != self.user_id:
                raise MatrixError(
                    MatrixFault(kind="auth", reason=f"the access token is {who.user_id}'s")
                )
            self.device_id = str(who.device_id or "")
            return self.device_id

        async def login() -> Any:
            return await self.api.login(
                identifier=UserID(self.user_id),
                login_type=LoginType.PASSWORD,
                password=password,
                device_id=device_id or None,
                device_name="agentd",
                store_access_token=True,
            )

        try:
            answer = await self._call("login", login, self._timeout)
        except MatrixError as exc:
            if not exc.fault.reason.startswith("HTTP 403"):
                raise
            # The spec's answer to a wrong user or password at login, unlike a 403 elsewhere
            # (a room's permission): the credentials were refused.
            raise MatrixError(MatrixFault(kind="auth", reason=exc.fault.reason)) from None
        self.device_id = str(answer.device_id)
        return self.device_id

    async def sync(self, since: str | None, wait_ms: int, sync_filter: str = "") -> dict[str, Any]:
        """One long poll; the server's JSON as it is. `sync_filter`: a filter as JSON, sent
        inline (the spec's `filter` takes an id or, starting with "{", the filter itself), so
        there is no filter id to keep per login."""

        async def sync() -> Any:
            # mautrix passes `filter_id` through as the `filter` query parameter unchanged.
            return await self.api.sync(since=since, timeout=wait_ms, filter_id=sync_filter or None)

        wait = (wait_ms / 1000 if since else 0) + self._timeout
        return dict(await self._call("sync", sync, wait))

    async def messages(self, room_id: str, start: str, stop: str, limit: int) -> dict[str, Any]:
        """One page of a room's history, newest first, from `start` back towards `stop`
        (`GET /rooms/{room}/messages?dir=b`); the server's JSON as it is."""
        query = {"dir": "b", "from": start, "to": stop, "limit": str(limit)}

        async def page() -> Any:
            path = Path.v3.rooms[RoomID(room_id)].messages
            return await self._http.request(Method.GET, path, query_params=query)

        answer = await self._call("messages", page, self._timeout)
        return answer if isinstance(answer, dict) else {}

    async def own_messages(self, room_id: str, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` messages this account sent in the room, newest first (one page
        of `GET /rooms/{room}/messages?dir=b`, filtered to its sender). Synapse gives the
        device that sent one its transaction id, under `unsigned` → `transaction_id`."""
        only_mine = {"senders": [self.user_id], "types": ["m.room.message"]}
        query = {"dir": "b", "limit": str(limit), "filter": json.dumps(only_mine)}

        async def page() -> Any:
            path = Path.v3.rooms[RoomID(room_id)].messages
            return await self._http.request(Method.GET, path, query_params=query)

        answer = await self._call("messages", page, self._timeout)
        chunk = answer.get("chunk") if isinstance(answer, dict) else None
        return [e for e in chunk if isinstance(e, dict)] if isinstance(chunk, list) else []

    async def event(self, room_id: str, event_id: str) -> dict[str, Any]:
        """One event as the server holds it (`GET /rooms/{room}/event/{event}`): its original
        content, with its newest edit under `unsigned` → `m.relations` → `m.replace`."""

        async def get() -> Any:
            path = Path.v3.rooms[RoomID(room_id)].event[EventID(event_id)]
            return await self._http.request(Method.GET, path)

        answer = await self._call("event", get, self._timeout)
        return answer if isinstance(answer, dict) else {}

    async def send(
        self, room_id: str, event_type: str, content: dict[str, Any], txn_id: str
    ) -> str:
        """PUT the event under `txn_id`: a repeat (a retry, a re-run) gives the same event."""

        async def send() -> Any:
            return await self.api.send_message_event(
                RoomID(room_id), EventType.find(event_type), content, txn_id=txn_id
            )

        return str(await self._call("send", send, self._timeout))

    async def join(self, room_id: str) -> None:
        await self._call("join", lambda: self.api.join_room_by_id(RoomID(room_id)), self._timeout)

    async def leave(self, room_id: str, reason: str = "") -> None:
        """Leave a room, or refuse an invite (a leave before joining); `reason` is shown."""
        await self._call(
            "leave", lambda: self.api.leave_room(RoomID(room_id), reason=reason), self._timeout
        )

    async def typing(self, room_id: str, on: bool) -> None:
        timeout = 10_000 if on else 0
        await self._call(
            "typing", lambda: self.api.set_typing(RoomID(room_id), timeout), self._timeout
        )

    async def upload(self, data: bytes, mime_type: str, filename: str) -> str:
        async def upload() -> Any:
            return await self.api.upload_media(data, mime_type=mime_type, filename=filename)

        return str(await self._call("upload", upload, self._timeout + len(data) / 100_000))

    async def download(self, mxc: str, max_bytes: int) -> bytes:
        """The file at `mxc`, read no further than `max_bytes` (MatrixError past it)."""
        server, _, media_id = mxc.removeprefix("mxc://").partition("/")
        if not server or not media_id or "/" in media_id:
            raise MatrixError(MatrixFault(kind="permanent", reason="not an mxc:// URI"))
        path = Path.v1.media.download[server][media_id]
        too_big = MatrixError(
            MatrixFault(kind="permanent", reason=f"the file is over {max_bytes} bytes")
        )

        async def download() -> bytes:
            url = self._http.base_url.with_path(self._http._full_path(path), encoded=True)
            headers = {"Authorization": f"Bearer {self._http.token}"}
            async with self._session.get(url, headers=headers) as answer:
                if answer.status != 200:
                    raise MatrixRequestError(answer.status, f"HTTP {answer.status}")
                if (answer.content_length or 0) > max_bytes:
                    raise too_big
                data = await read_at_most(answer.content, max_bytes + 1)
            if len(data) > max_bytes:
                raise too_big
            return data

        return await self._call("download", download, self._timeout + max_bytes / 100_000)

    async def request(self, method: str, path: str, content: dict[str, Any] | None = None) -> Any:
        """Any other client API call (path below /_matrix/client/v3)."""
        full = Path.v3.raw(path)
        return await self._call(
            path, lambda: self._http.request(Method[method], full, content), self._timeout
        )
