"""The cyclic garbage collector around start-up: paused while imports run, then kept off them.

Why: importing aiogram, the Anthropic SDK and agentd creates ~200,000 objects (classes, their
pydantic schemas, functions) and almost no garbage, yet each 700 new objects trigger a
collection that walks the young ones: about a tenth of start-up's CPU. Imports run in threads
at once, so pauses nest; collection resumes when the last one ends (unless it was off before),
with what they made frozen first (else the next collections walk all of it, young as it is).
Once the daemon is up, those objects live as long as the process: `freeze_startup` takes them
out of the collector's reach, so a full collection walks only what came since (benchmarks/
README.md: a burst's full collection takes ~3 ms instead of ~130 ms with every turn waiting).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class _Pauses:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False

    def enter(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._depth += 1

    def exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                # What the imports made lives as long as the process: out of the collector's
                # reach at once, or the first collections after the pause walk all of it.
                gc.freeze()
                if self._resume:
                    gc.enable()


_PAUSES = _Pauses()  # one per process, like the collector itself


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection inside the block (nor in other threads while it runs)."""
    _PAUSES.enter()
    try:
        yield
    finally:
        _PAUSES.exit()


def freeze_startup() -> None:
    """Everything alive now is left out of future collections (it lives as long as we do)."""
    gc.freeze()


def pausing(fn: Callable[P, T]) -> Callable[P, T]:
    """`fn` run inside `paused()`: for handing an import to a worker thread."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with paused():
            return fn(*args, **kwargs)

    return run
