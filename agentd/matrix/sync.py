"""The /sync long poll, driven by hand: the next poll uses a token only once the events it
covers are committed (matrix/intake.py)."""

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
from agentd.matrix.gaps import SYNC_FILTER
from agentd.matrix.intake import (
    CallbackHandler,
    CommandHook,
    load_since,
    next_batch,
    persist_sync,
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
                since = await self._store(response, first=since is None)
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

    async def _store(self, response: dict[str, object], *, first: bool) -> str:
        result = await self._db.write(
            persist_sync,
            response,
            self._me,
            self._engine,
            self._on_callback,
            self._on_command,
            first=first,
            busy=self._busy,
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
