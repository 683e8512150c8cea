"""The /sync long poll, driven by hand: the next poll uses a token only once the events it
covers are committed (matrix/intake.py), with what a cut timeline left out read back first
(matrix/gaps.py)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

from agentd.chat.busy import BusyMode
from agentd.db import Database
from agentd.durable import Engine
from agentd.matrix.classify import MatrixIdentity
from agentd.matrix.client import MatrixClient, MatrixError
from agentd.matrix.gaps import SYNC_FILTER, Gap, limited_rooms, page_back
from agentd.matrix.intake import (
    CallbackHandler,
    CommandHook,
    load_since,
    next_batch,
    persist_sync,
    taken_events,
)

log = logging.getLogger("agentd.matrix")
MAX_BACKOFF = 5.0


class Syncer:
    def __init__(
        self,
        client: MatrixClient,
        db: Database,
        engine: Engine,
        me: MatrixIdentity,
        *,
        on_callback: CallbackHandler,
        on_command: CommandHook,
        timeout: int = 30,
        on_progress: Callable[[], None] = lambda: None,
        busy: BusyMode = "queue",
    ) -> None:
        self._client = client
        self._db = db
        self._engine = engine
        self._me = me
        self._on_callback = on_callback
        self._on_command = on_command
        self._timeout = timeout
        self._on_progress = on_progress
        self._busy = busy
        self._stopping = asyncio.Event()
        self._failures = 0

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Sync until stopped; only a rejected login ends it."""
        since = await self._db.read(load_since)
        while not self._stopping.is_set():
            try:
                response = await self._client.sync(since, self._wait_ms(since), SYNC_FILTER)
                gaps = await self._read_gaps(response, since)
                since = await self._store(response, first=since is None, gaps=gaps)
                self._failures = 0
            except MatrixError as exc:
                if exc.fault.kind == "auth":
                    log.error("the homeserver rejected agentd's login", extra={"reason": str(exc)})
                    raise
                await self._backoff(str(exc))
            except Exception as exc:
                log.exception("storing a sync failed; retrying")
                await self._backoff(type(exc).__name__)
            self._on_progress()

    def _wait_ms(self, since: str | None) -> int:
        """How long the server may hold a sync. The first one (no token) is answered at once
        whatever it says (Synapse: handlers/sync.py), but Synapse caches each answer for two
        minutes by its request, device and `timeout` included: a random `timeout` keeps a
        fresh start (a new database on the same device) from being handed another process's
        first answer, whose token would replay that process's messages as new."""
        return self._timeout * 1000 if since else secrets.randbelow(1_000_000) + 1

    async def _read_gaps(self, response: dict[str, object], since: str | None) -> dict[str, Gap]:
        """What each cut timeline left out since the last sync. None after a first sync: all
        before it is the past, never answered."""
        if since is None:
            return {}
        gaps = {}
        for room_id, start in limited_rooms(response, self._me.bot).items():
            gaps[room_id] = await self._read_gap(room_id, start, since)
            log.info(
                "matrix timeline gap read back",
                extra={
                    "room": room_id,
                    "events": len(gaps[room_id].events),
                    "complete": gaps[room_id].complete,
                },
            )
        return gaps

    async def _read_gap(self, room_id: str, start: str, since: str) -> Gap:
        try:
            return await page_back(self._client, room_id, start, since, self._me.bot, self._taken)
        except MatrixError as exc:
            if exc.fault.kind != "permanent":
                raise  # an outage or a refused login: the sync is tried again, or stops
            # A refusal for good (the room's history hidden from the bot, say) must not stall
            # intake: the timeline is taken, and the owner told the rest was not read.
            log.warning("matrix gap not readable", extra={"room": room_id, "reason": str(exc)})
            return Gap(complete=False)

    async def _taken(self, event_ids: list[str]) -> set[str]:
        return await self._db.read(taken_events, event_ids)

    async def _store(
        self, response: dict[str, object], *, first: bool, gaps: dict[str, Gap]
    ) -> str:
        result = await self._db.write(
            persist_sync,
            response,
            self._me,
            self._engine,
            self._on_callback,
            self._on_command,
            first=first,
            busy=self._busy,
            gaps=gaps,
        )
        for room, sender, reason in result.ignored:
            log.info(
                "matrix event ignored", extra={"room": room, "sender": sender, "reason": reason}
            )
        for instance_id in result.cancels:  # interrupted: already flagged, stop it now
            self._engine.stop_flagged(instance_id)
        for key in result.keys:
            self._engine.kick(key)
        if result.keys:
            await asyncio.sleep(0)  # let the turns take their first step before the next poll
        if result.presses:
            await self._engine.poll_once()  # wake turns waiting for a card's answer now
        return next_batch(response)

    async def _backoff(self, reason: str) -> None:
        self._failures += 1
        wait = min(0.5 * 2 ** (self._failures - 1), MAX_BACKOFF)
        log.warning("matrix sync failed, retrying", extra={"reason": reason, "wait_s": wait})
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=wait)
        except TimeoutError:
            pass
