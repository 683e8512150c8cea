"""Where a Python process's start-up goes: installed as `sitecustomize.py` by
benchmarks/peers_first_answer.py, active only when STARTUP_PROBE names a file.

It writes JSON lines to that file as the process runs:
- `{"mark": "probe"}` once, when the interpreter reaches site (the end of interpreter start);
- `{"imports": {...}}` at each phase end and every 0.25 s of import activity: self CPU and
  self wall seconds of every module executed so far, summed by package (agentd by
  sub-package), per thread — an import's time less the imports it made itself, as
  `python -X importtime` counts it, but per thread, so the SDK's import in its own thread is
  not charged to the main thread's imports it happens to interleave with;
- `{"phase": NAME, "start": t, "end": t, "cpu": s}` for each function listed in
  STARTUP_PROBE_HOOKS ("module:attr" or "module:Class.attr", comma-separated; coroutines and
  plain functions alike) the first time it runs: wall times (time.time()) and the process's
  CPU (all threads) between its start and end.

Every figure is the process's own accounting (getrusage, thread CPU clocks); nothing is
sampled. The wrapper costs a few microseconds per module executed: the benchmark prints the
probed start beside an unprobed one.
"""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import json
import os
import resource
import sys
import threading
import time
from typing import Any


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Probe:
    def __init__(self, path: str, hooks: str) -> None:
        self.out = open(path, "a", buffering=1)  # open as long as the process
        self.lock = threading.Lock()
        self.local = threading.local()
        self.totals: dict[tuple[str, str], list[float]] = {}
        self.hooks: dict[str, list[str]] = {}
        for hook in filter(None, (h.strip() for h in hooks.split(","))):
            module, attr = hook.split(":")
            self.hooks.setdefault(module, []).append(attr)
        self.done: set[str] = set()
        self.last_flush = time.monotonic()
        self.write({"mark": "probe", "time": time.time(), "cpu": _cpu()})

    def write(self, record: dict[str, Any]) -> None:
        with self.lock:
            self.out.write(json.dumps(record) + "\n")

    def flush_imports(self) -> None:
        self.last_flush = time.monotonic()
        with self.lock:
            snapshot = {f"{t}|{k}": v for (t, k), v in self.totals.items()}
        self.write({"imports": snapshot, "time": time.time(), "cpu": _cpu()})

    # -- imports ------------------------------------------------------------------------------

    def enter(self) -> list[float]:
        stack = self.local.__dict__.setdefault("stack", [])
        frame = [time.thread_time(), time.perf_counter(), 0.0, 0.0]
        stack.append(frame)
        return frame

    def leave(self, name: str, frame: list[float], executed: bool = False) -> None:
        cpu = time.thread_time() - frame[0]
        wall = time.perf_counter() - frame[1]
        stack = self.local.stack
        stack.pop()
        if stack:  # the parent's self time excludes this import
            stack[-1][2] += cpu
            stack[-1][3] += wall
        parts = name.split(".")
        key = ".".join(parts[:2]) if parts[0] == "agentd" and len(parts) > 1 else parts[0]
        thread = threading.current_thread()
        where = "main" if thread is threading.main_thread() else thread.name
        with self.lock:
            total = self.totals.setdefault((where, key), [0.0, 0.0, 0])
            total[0] += cpu - frame[2]
            total[1] += wall - frame[3]
            total[2] += 1
        if not stack and time.monotonic() - self.last_flush > 0.25:
            self.flush_imports()
        if executed and name in self.hooks:
            self.hook(name)

    # -- phases -------------------------------------------------------------------------------

    def hook(self, module_name: str) -> None:
        module = sys.modules.get(module_name)
        for attr in self.hooks.pop(module_name, []):
            owner: Any = module
            *path, last = attr.split(".")
            for part in path:
                owner = getattr(owner, part, None)
            raw = owner.__dict__.get(last) if owner is not None else None
            if raw is None:
                self.write({"missing": f"{module_name}:{attr}"})
                continue
            kind = type(raw) if isinstance(raw, classmethod | staticmethod) else None
            fn = raw.__func__ if kind is not None else raw
            wrapped = self.wrap(attr, fn)
            setattr(owner, last, kind(wrapped) if kind is not None else wrapped)

    def wrap(self, name: str, fn: Any) -> Any:
        probe = self

        def record(start: float, cpu: float) -> None:
            if name not in probe.done:
                probe.done.add(name)
                probe.write(
                    {"phase": name, "start": start, "end": time.time(), "cpu": _cpu() - cpu}
                )
                probe.flush_imports()

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                start, cpu = time.time(), _cpu()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    record(start, cpu)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.time(), _cpu()
            try:
                return fn(*args, **kwargs)
            finally:
                record(start, cpu)

        return wrapper


class _Loader(importlib.abc.Loader):
    """The real loader, its execution timed; everything else delegated to it."""

    def __init__(self, probe: _Probe, loader: Any, name: str) -> None:
        self._probe, self._loader, self._name = probe, loader, name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._loader, attr)

    def create_module(self, spec: Any) -> Any:
        frame = self._probe.enter()
        try:
            return self._loader.create_module(spec)
        finally:
            self._probe.leave(self._name, frame)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        frame = self._probe.enter()
        try:
            self._loader.exec_module(module)
        finally:
            self._probe.leave(self._name, frame, executed=True)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, probe: _Probe) -> None:
        self._probe = probe

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(self._probe, spec.loader, name)
        return spec


def install() -> None:
    path = os.environ.get("STARTUP_PROBE")
    if not path:
        return
    probe = _Probe(path, os.environ.get("STARTUP_PROBE_HOOKS", ""))
    sys.meta_path.insert(0, _Finder(probe))


install()
