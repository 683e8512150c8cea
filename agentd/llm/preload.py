"""Import a provider SDK in a thread, started as soon as the daemon knows it needs it.

The official SDKs take a second or two of CPU to import; a daemon spends its first seconds
waiting on the network (Telegram's getMe, the database), so the import runs then, in a thread,
and the first model call waits for it only if it is not done yet. Plain `importlib`: nothing of
the SDK's internals is touched, so a new release cannot break this.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import threading
from types import ModuleType

from agentd.runtime.gc_pause import paused


class Preload:
    """`Preload("anthropic")` starts importing it; `await .module()` (or `.wait()`) gets it."""

    def __init__(self, name: str, extra: str | None = None) -> None:
        self.name = name
        self._extra = extra
        self._future: concurrent.futures.Future[ModuleType] = concurrent.futures.Future()
        thread = threading.Thread(target=self._run, name=f"import-{name}", daemon=True)
        thread.start()

    def _run(self) -> None:
        try:
            # No cyclic collection meanwhile: the SDK's import makes ~100,000 long-lived
            # objects and no garbage, and collections walking them were a fifth of its CPU.
            with paused():
                module = importlib.import_module(self.name)
            self._future.set_result(module)
        except BaseException as exc:  # handed to whoever awaits the module
            self._future.set_exception(exc)

    def wait(self) -> ModuleType:
        """The module, blocking until it is imported (ImportError naming the extra if absent)."""
        try:
            return self._future.result()
        except ModuleNotFoundError as exc:
            if self._extra is None or exc.name != self.name:
                raise
            raise ImportError(
                f"the Python package {self.name!r} is not installed; "
                f"install it with: pip install 'agentd[{self._extra}]'"
            ) from None

    async def module(self) -> ModuleType:
        if not self._future.done():
            await asyncio.wrap_future(self._future)  # the loop keeps running meanwhile
        return self.wait()


_started: dict[str, Preload] = {}


def preload(name: str, extra: str | None = None) -> Preload:
    """The one import of `name` for the process, started now if it was not yet."""
    if name not in _started:
        _started[name] = Preload(name, extra)
    return _started[name]
