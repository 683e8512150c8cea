"""Shared plumbing for the HTTP fakes: serve an aiohttp app in-loop, in a thread or a process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Self, TypeVar

from aiohttp import web

T = TypeVar("T")


class FakeServer:
    """Base class: subclasses build the aiohttp routes; this runs and synchronises them."""

    #: How long shutdown waits for in-flight handlers (long polls, holds) before cancelling them.
    shutdown_timeout = 0.5

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        # One re-entrant lock guards all state; the condition lets sync waiters block on changes.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._closing_event: asyncio.Event | None = None

    # -- to be provided by subclasses ---------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def _on_loop_started(self) -> None:
        """Called in the server loop once it runs (create asyncio primitives here)."""

    def _on_closing(self) -> None:
        """Called in the server loop before shutdown (wake long polls, release holds)."""

    # -- addresses ----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if not self.port:
            raise RuntimeError("server is not started")
        return f"http://{self.host}:{self.port}"

    # -- in the current event loop ------------------------------------------------------------

    async def start(self) -> None:
        """Serve in the running loop (the test's loop); blocking waiters must not be used then."""
        self._loop = asyncio.get_running_loop()
        self._closing = False
        self._closing_event = asyncio.Event()
        self._on_loop_started()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.add_routes(app)
        # access_log=None: the fakes are chatty enough through their inspection lists.
        self._runner = web.AppRunner(
            app, access_log=None, shutdown_timeout=self.shutdown_timeout, handle_signals=False
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self._closing = True
        if self._closing_event is not None:
            self._closing_event.set()
        self._on_closing()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- in a background thread ---------------------------------------------------------------

    def start_background(self, timeout: float = 10.0) -> Self:
        """Start serving from a daemon thread with its own loop; returns self once listening."""
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as e:  # report start failures to the caller's thread
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name=type(self).__name__, daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"{type(self).__name__} did not start within {timeout}s")
        if failure:
            raise failure[0]
        return self

    def stop_background(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None

    @classmethod
    @contextlib.contextmanager
    def running(cls, *args: Any, **kwargs: Any) -> Iterator[Self]:
        """`with FakeX.running() as fake:` serve on a free port from a background thread."""
        server = cls(*args, **kwargs)
        server.start_background()
        try:
            yield server
        finally:
            server.stop_background()

    @classmethod
    @contextlib.asynccontextmanager
    async def serving(cls, *args: Any, **kwargs: Any) -> AsyncIterator[Self]:
        """`async with FakeX.serving() as fake:` serve in the current loop (use async waiters)."""
        server = cls(*args, **kwargs)
        await server.start()
        try:
            yield server
        finally:
            await server.stop()

    # -- cross-thread synchronisation ---------------------------------------------------------

    def _call_in_loop(self, fn: Callable[[], None]) -> None:
        """Run fn in the server loop (safe from any thread); a no-op before the server starts."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop closed between check and call
                loop.call_soon_threadsafe(fn)

    def _changed(self) -> None:
        """Tell blocking waiters that the recorded state changed. Call with the lock held."""
        self._cond.notify_all()

    def wait_until(self, predicate: Callable[[], T], timeout: float = 5.0, what: str = "") -> T:
        """Block until predicate() is truthy (checked under the lock); return its value."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"timed out after {timeout}s waiting for {what or predicate}"
                    )
                self._cond.wait(remaining)

    async def wait_until_async(
        self, predicate: Callable[[], T], timeout: float = 5.0, what: str = ""
    ) -> T:
        """Async version of wait_until (polls), usable when the server shares the test's loop."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}")
            await asyncio.sleep(0.01)

    # -- helpers for handlers -----------------------------------------------------------------

    @staticmethod
    def drop_connection(request: web.Request) -> web.StreamResponse:
        """Close the TCP connection without answering (the client sees a disconnect)."""
        if request.transport is not None:
            request.transport.abort()
        # aiohttp needs a response object; nothing reaches the client since the socket is gone.
        return web.Response(status=500)

    @staticmethod
    def reset_connection(request: web.Request) -> web.StreamResponse:
        """Reset the TCP connection without answering (an RST: a server or proxy that aborted
        it; the client sees its read fail, not a clean disconnect)."""
        if request.transport is not None:
            sock = request.transport.get_extra_info("socket")
            if sock is not None:  # linger 0: the close sends RST, not FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return FakeServer.drop_connection(request)

    @classmethod
    def main(cls, argv: list[str] | None = None, **kwargs: Any) -> None:
        """CLI: serve until SIGTERM/SIGINT; print the base URL on stdout once listening."""
        parser = argparse.ArgumentParser(description=cls.__doc__)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
        cls.add_cli_arguments(parser)
        args = parser.parse_args(argv)
        server = cls(host=args.host, port=args.port, **cls.cli_kwargs(args), **kwargs)

        async def serve() -> None:
            await server.start()
            print(server.base_url, flush=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
            await server.stop()

        asyncio.run(serve())
        sys.exit(0)

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Subclasses add their own options."""

    @classmethod
    def cli_kwargs(cls, args: argparse.Namespace) -> dict[str, Any]:
        return {}


async def sleep_or_closing(server: FakeServer, seconds: float) -> None:
    """Sleep up to `seconds`, returning early when the server shuts down."""
    if server._closing_event is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server._closing_event.wait(), seconds)
