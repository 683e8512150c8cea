"""The API a workflow sees: `step.do`, `step.sleep`, `step.sleep_until`, `step.wait_for_event`."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import inspect
import json
import logging
import math
import time
import typing
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_json

from agentd.durable import store
from agentd.durable.errors import (
    CancelRequested,
    DivergenceError,
    LimitExceeded,
    NonRetryable,
    OutcomeUnknown,
    StepFailed,
    Suspended,
)
from agentd.durable.host import StepHost
from agentd.durable.pending import Pending

T = TypeVar("T")
# A retry's backoff longer than this is a durable sleep: the wake-up time follows from the
# journaled failure, so a restart neither restarts the wait nor skips it, and the instance
# gives its concurrency slot back meanwhile (R-DUR-4 for retries).
DURABLE_BACKOFF_AFTER = 5.0
Delivery = Literal["at_least_once", "at_most_once", "idempotent"]
# Ordinals reserved for each branch of `Step.fork`: more than any one tool call takes.
BRANCH_STEPS = 32
# What an instance waits for (`waiting_for`) when a step can only run after a restart.
RESTART = "restart"
log = logging.getLogger("agentd.durable")


class Retry(BaseModel):
    """How often a step is tried and how long to wait between attempts."""

    limit: int = 3
    delay: float = 1.0
    backoff: Literal["constant", "linear", "exponential"] = "exponential"
    max_delay: float = 60.0
    jitter: float = 0.0

    def delay_after(self, failures: int, seed: str = "") -> float:
        """Seconds to wait after the n-th failure. The jitter is drawn from `seed` (the step
        and attempt), so a resumed run computes the very wait the first run began."""
        if self.backoff == "constant":
            wait = self.delay
        elif self.backoff == "linear":
            wait = min(self.delay * failures, self.max_delay)
        else:
            wait = min(self.delay * 2 ** (failures - 1), self.max_delay)
        if self.jitter:
            digest = hashlib.sha256(seed.encode()).digest()
            wait += self.jitter * int.from_bytes(digest[:8], "big") / 2**64
        return wait


NO_RETRY = Retry(limit=1)


class LocalStep(NamedTuple):
    """A database-only step for `Step.locals`: fn(conn, *args), journaled under `name`."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    result_type: Any = None


class Event(BaseModel):
    type: str
    payload: dict[str, Any]
    event_id: str | None = None
    created_at: float


_adapters: dict[Any, TypeAdapter[Any]] = {}


def _return_hint(fn: Callable[..., Any]) -> Any:
    """The return annotation alone: parameters may name types only imported for type checking."""
    target = inspect.unwrap(fn)
    hint = getattr(target, "__annotations__", {}).get("return")
    if isinstance(hint, str):
        try:
            hint = eval(hint, getattr(target, "__globals__", {}), {})  # our own annotation text
        except Exception:
            return None
    return hint


def _retryable(exc: BaseException) -> bool:
    """Exceptions only, and not those that say retrying cannot help: NonRetryable, a limit, or
    any error carrying `retryable = False` (an LLMError for a 400, say)."""
    if not isinstance(exc, Exception) or isinstance(exc, NonRetryable | LimitExceeded):
        return False
    return getattr(exc, "retryable", True) is not False


def _needs_restart(exc: BaseException) -> bool:
    """An error carrying `needs_restart = True` says its effect cannot happen while this
    process runs (a channel's network refused agentd's credentials, which stops agentd): the
    step neither fails nor is tried again here, it waits for the next start."""
    return getattr(exc, "needs_restart", False) is True


# Weak keys: a step function made on the fly (a closure) must not be kept alive by the cache.
_hints: weakref.WeakKeyDictionary[Any, TypeAdapter[Any] | None] = weakref.WeakKeyDictionary()


def _result_adapter(fn: Callable[..., Any], result_type: Any) -> TypeAdapter[Any] | None:
    if result_type is None:
        try:
            return _hints[fn]
        except (KeyError, TypeError):
            pass
        adapter = _build_adapter(fn, None)
        with contextlib.suppress(TypeError):  # unhashable callables are just not cached
            _hints[fn] = adapter
        return adapter
    return _build_adapter(fn, result_type)


def _build_adapter(fn: Callable[..., Any], result_type: Any) -> TypeAdapter[Any] | None:
    if result_type is None:
        result_type = _return_hint(fn)
        # An async def's hint is its awaited type; Awaitable[X] hints come from partials & co.
        if typing.get_origin(result_type) in (Awaitable, typing.Coroutine):
            result_type = typing.get_args(result_type)[-1]
    if result_type is None or result_type is Any:
        return None
    if result_type not in _adapters:
        _adapters[result_type] = TypeAdapter(result_type)
    return _adapters[result_type]


def journal_json(encoded: str, redact: Callable[[str], str], what: str) -> str:
    """`encoded` with every secret the redactor knows hidden inside its strings. What is
    journaled is what the run gets back, live or replayed, so a step that returned a secret
    reads "[REDACTED]" both times instead of a run that changes after a restart."""
    if redact(encoded) == encoded:  # nearly always: one search per secret
        return encoded
    log.warning(
        "%s returned a secret; it is journaled and handed back as [REDACTED]: read it with "
        "step.secret inside the step that uses it instead of returning it",
        what,
    )
    hidden = _hide_in_strings(json.loads(encoded), redact)
    return to_json(hidden, inf_nan_mode="constants").decode()


def _hide_in_strings(value: Any, redact: Callable[[str], str]) -> Any:
    # String by string, so the JSON stays valid whatever a secret looks like.
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_hide_in_strings(item, redact) for item in value]
    if isinstance(value, dict):
        return {redact(k): _hide_in_strings(v, redact) for k, v in value.items()}
    return value


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


@dataclass
class _Call:
    """One `Step.do` call as its attempts see it."""

    name: str
    ordinal: int
    fn: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...]
    timeout: float | None
    delivery: Delivery
    mark: bool
    adapter: Any
    attempt: int = 0  # attempts made so far, this run and journaled earlier
    begun: bool = False  # the step's row exists, so an attempt adds to it


class Step:
    """Journaled steps of one workflow instance run; created by the engine for every (re)run.

    What each kind of step commits (R-DUR-7; "unsynced" = survives kill -9 at once, and a power
    loss from the next synced commit on):

    - at_least_once (default): one synced commit after the call, with its result. A crash
      during the call leaves no row; the step runs again.
    - at_most_once: a synced commit of the attempt before the call, another after it.
    - idempotent: no commit of its own; its row rides along with the instance's next commit.
      A crash before that runs it again, which such a step allows (reads, lookups).
    - `local(...)`: a database-only step; its effect and its row are one unsynced commit.
    - sleep / wait_for_event: the deadline is a synced commit; waking and events are unsynced.
    """

    def __init__(
        self,
        engine: StepHost,
        instance_id: str,
        journal: dict[int, store.StepRecord],
        attempts: list[store.AttemptRecord],
        retries: int = 0,
    ) -> None:
        self.engine = engine
        self.instance_id = instance_id
        # The owner's retries of the instance so far: the same in every replay of one run, one
        # more in the run a retry begins (store.reset_for_retry).
        self.retries = retries
        self.pending = Pending()
        self._journal = journal
        self._open_attempts = {a.ordinal for a in attempts if a.outcome == "running"}
        self._attempts: dict[int, list[store.AttemptRecord]] = {}
        for a in attempts:
            self._attempts.setdefault(a.ordinal, []).append(a)
        self._attempt_counts: dict[int, int] = {}
        for a in attempts:
            self._attempt_counts[a.ordinal] = max(self._attempt_counts.get(a.ordinal, 0), a.attempt)
        self._ordinal = 0
        self._bound: int | None = None  # a branch's last ordinal (fork)
        self._names: set[str] = set()

    @property
    def resumed(self) -> bool:
        """Whether an earlier run of this instance journaled anything (this run replays it)."""
        return bool(self._journal) or bool(self._attempt_counts)

    @property
    def clock(self) -> Any:
        return self.engine.clock

    def _next(self, name: str, kind: str) -> tuple[int, store.StepRecord | None]:
        if name in self._names:
            raise DivergenceError(
                f"step name {name!r} used twice in one run of {self.instance_id}; "
                "step names must be unique (use counters in loops: llm#1, llm#2)"
            )
        self._names.add(name)
        self._ordinal += 1
        if self._bound is not None and self._ordinal > self._bound:
            raise LimitExceeded(
                f"step {name!r}: a branch of {self.instance_id} may take {BRANCH_STEPS} steps"
            )
        if self._ordinal > self.engine.limits.max_steps_per_instance:
            raise LimitExceeded(
                f"instance {self.instance_id} exceeded {self.engine.limits.max_steps_per_instance}"
                " steps (engine.max_steps_per_instance)"
            )
        record = self._journal.get(self._ordinal)
        if record is not None and (record.name != name or record.kind != kind):
            raise DivergenceError(
                f"replay of {self.instance_id} diverged at step {self._ordinal}: the journal has "
                f"{record.kind} {record.name!r}, the code asked for {kind} {name!r}"
            )
        return self._ordinal, record

    def fork(self, n: int) -> list[Step]:
        """n views of this run for steps that run at the same time (a TaskGroup): each branch
        journals into a block of BRANCH_STEPS ordinals of its own, so the journal reads the
        same whichever branch finishes first, and a replay matches it; this run goes on after
        the last block. Step names stay unique across the branches."""
        base = self._ordinal
        branches = []
        for i in range(n):
            branch = copy.copy(self)  # shares the journal, the held rows and the names
            branch._ordinal = base + i * BRANCH_STEPS
            branch._bound = base + (i + 1) * BRANCH_STEPS
            branches.append(branch)
        self._ordinal = base + n * BRANCH_STEPS
        return branches

    def journaled_next(self) -> str | None:
        """The name of the step the journal holds next (this run replays it), or None. Lets a
        workflow keep, for an instance journaled by older code, the path that code took, when
        new instances take a new one (a step added before it): the journal is never stranded."""
        record = self._journal.get(self._ordinal + 1)
        return record.name if record is not None else None

    def unreplayed(self) -> list[str]:
        """Journaled steps this run never reached: a workflow that finishes with some left
        took another path than the journal did (new code, or non-determinism)."""
        return [r.name for o, r in sorted(self._journal.items()) if o > self._ordinal]

    def _check_running(self) -> None:
        if self.engine.stopping:
            raise Suspended()

    async def _write(
        self, fn: Callable[..., T], *args: Any, synced: bool = False, **kwargs: Any
    ) -> T:
        """One transaction of this instance, carrying the rows held back until now."""
        write = self.engine.write if synced else self.engine.write_unsynced
        return await self.pending.write(write, fn, *args, **kwargs)

    def _replayed(self, name: str, ordinal: int, record: store.StepRecord | None) -> bool:
        """Whether the journal already settles this step (then `_replay` gives its outcome)."""
        if record is None:
            return False
        if record.status in ("complete", "failed", "unknown"):
            return True
        return record.delivery == "at_most_once" and ordinal in self._open_attempts

    async def _replay(
        self, name: str, ordinal: int, record: store.StepRecord, adapter: TypeAdapter[Any] | None
    ) -> Any:
        if record.status == "complete":
            return self._decode(record.result, adapter)
        if record.status == "failed":
            error_type, _, message = (record.error or "Error: ").partition(": ")
            raise StepFailed(name, error_type, message)
        if record.status == "running":  # an at-most-once attempt the crash interrupted
            await self._write(self._mark_unknown, ordinal, synced=True)
        raise OutcomeUnknown(name)

    async def do(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        retry: Retry | None = None,
        timeout: float | None = None,
        delivery: Delivery = "at_least_once",
        result_type: Any = None,
        mark: bool = False,
    ) -> T:
        """Run fn(*args) once for this instance and journal its JSON result; replays return it.

        `mark=True` journals each attempt (unsynced) before the call, so an attempt the process
        died in stays visible (`store.interrupted_attempts`): for sends that may have landed."""
        ordinal, record = self._next(name, "do")
        adapter = _result_adapter(fn, result_type)
        if self._replayed(name, ordinal, record):
            return await self._replay(name, ordinal, record, adapter)  # type: ignore[arg-type]
        self._check_running()
        policy = retry or NO_RETRY
        attempt_once = partial(
            self._attempt,
            _Call(
                name,
                ordinal,
                fn,
                args,
                timeout,
                delivery,
                mark,
                adapter,
                attempt=self._attempt_counts.get(ordinal, 0),
                begun=record is not None and (delivery == "at_most_once" or mark),
            ),
        )
        try:
            if policy.limit <= 1:
                encoded = await attempt_once()  # the common case: no retry machinery
            else:
                encoded = await self._retrying(attempt_once, policy, ordinal, record)
        except (asyncio.CancelledError, Suspended):
            raise
        except Exception as exc:
            await self._write(
                store.finish_step,
                self.instance_id,
                ordinal,
                self.clock.now(),
                status="failed",
                error=self.engine.redact(_error_text(exc)),
            )
            raise StepFailed(name, type(exc).__name__, self.engine.redact(str(exc))) from exc
        # Return what a replay would return, so the first run and every resume see the same.
        return self._decode(encoded, adapter)

    async def _retrying(
        self,
        attempt_once: Callable[[], Awaitable[str]],
        policy: Retry,
        ordinal: int,
        record: store.StepRecord | None,
    ) -> str:
        """Attempts until one succeeds, one fails for good, or `policy.limit` have failed in
        this sequence, counting those journaled by earlier runs (an owner's retry starts a new
        sequence: it moves the step's started_at)."""
        failures, last_failed = 0, 0.0
        if record is not None:
            earlier = [
                a
                for a in self._attempts.get(ordinal, ())
                if a.outcome == "failed" and a.started_at >= record.started_at
            ]
            failures = len(earlier)
            last_failed = max((a.finished_at or a.started_at for a in earlier), default=0.0)
        while True:
            if failures:
                seed = f"{self.instance_id}:{ordinal}:{failures}"
                await self._backoff(last_failed + policy.delay_after(failures, seed))
            try:
                return await attempt_once()
            except Exception as exc:  # CancelledError and Suspended end the step, never retry
                failures += 1
                if not _retryable(exc) or failures >= policy.limit:
                    raise
                last_failed = self.clock.now()

    async def _backoff(self, wake: float) -> None:
        remaining = wake - self.clock.now()
        if remaining <= 0:
            return
        if remaining <= DURABLE_BACKOFF_AFTER:
            with self.engine.blocked(self.instance_id, wake):
                await self.clock.sleep(remaining)
            return
        async with self.engine.suspended(self.instance_id, "sleeping", wake_at=wake):
            await self._sleep_until(wake)
        self._check_running()

    async def _sleep_until(self, wake: float) -> None:
        with self.engine.blocked(self.instance_id, wake):
            while (remaining := wake - self.clock.now()) > 0:  # a clock jump ends no wait early
                await self.clock.sleep(remaining)

    async def _begin_effect(self, call: _Call, now: float, synced: bool) -> None:
        """Journal an attempt whose effect may land (a send, an at-most-once call) before it
        runs, unless the instance was flagged for cancel first: then it ends as cancelled."""
        ordinal, attempt = call.ordinal, call.attempt

        def begin(conn: Any) -> None:
            store.refuse_if_cancelled(conn, self.instance_id)
            if call.begun:
                store.begin_attempt(conn, self.instance_id, ordinal, attempt, now)
            else:
                store.begin_step(
                    conn,
                    self.instance_id,
                    ordinal,
                    call.name,
                    "do",
                    now,
                    delivery=call.delivery,
                    attempt=attempt,
                )

        try:
            await self._write(begin, synced=synced)
        except CancelRequested:
            self.engine.cancelled_from_inside(self.instance_id)
            raise asyncio.CancelledError from None
        call.begun = True

    async def _attempt(self, call: _Call) -> Any:
        """One attempt of a `do` step: journal it, run it within its timeout, record the result."""
        call.attempt += 1
        attempt, name, ordinal, delivery = call.attempt, call.name, call.ordinal, call.delivery
        now = self.clock.now()
        # Only an at-most-once step has a synced row before its effect (R-DUR-7); a marked one
        # has an unsynced row, which survives the process dying (not the machine).
        synced = delivery == "at_most_once"
        if synced or call.mark:
            await self._begin_effect(call, now, synced)
        started = time.perf_counter()
        try:
            if call.timeout is None:  # most steps: no timeout context to enter and leave
                value = await call.fn(*call.args)
            else:
                async with asyncio.timeout(call.timeout):
                    value = await call.fn(*call.args)
            if call.adapter is None and isinstance(value, BaseModel):
                # A replay could only return a dict: refuse instead of changing type later.
                raise NonRetryable(
                    f"step {name!r} returned a {type(value).__name__} but its function has no "
                    "resolvable return annotation; pass result_type= to step.do"
                )
            encoded = self._encode(name, value)
        except BaseException as exc:
            if isinstance(exc, Suspended):
                raise
            if isinstance(exc, asyncio.CancelledError):
                task = asyncio.current_task()
                if task is None or task.cancelling():
                    raise  # we are being cancelled: cancel or shutdown, not a step failure
                # The step's own code ended in CancelledError (a tool's cancel scope…):
                # a failure of this attempt, or the engine would re-run it forever.
                exc = RuntimeError("the step's code was cancelled from inside")
            if isinstance(exc, TimeoutError):
                exc = TimeoutError(f"attempt timed out after {call.timeout}s")
            error = self.engine.redact(_error_text(exc))
            await self._record_attempt(name, ordinal, attempt, delivery, now, error=error)
            if _needs_restart(exc):
                self._log(name, attempt, started, "waits for a restart", error=error)
                await self._wait_for_restart()
            self._log(name, attempt, started, "failed", error=error)
            raise exc from None
        await self._record_attempt(name, ordinal, attempt, delivery, now, result=encoded)
        self._log(name, attempt, started, "complete")
        return encoded

    async def _wait_for_restart(self) -> typing.NoReturn:
        """The attempt is journaled as failed (so not as a send that may have landed), and the
        instance waits, keeping its key (its chat's later work stays behind it), until the
        engine stops; it resumes at the next start and runs the step again."""
        self._check_running()
        async with self.engine.suspended(self.instance_id, "waiting", waiting_for=RESTART):
            with self.engine.blocked(self.instance_id, math.inf):
                await asyncio.get_running_loop().create_future()  # ends by cancellation
        raise AssertionError("unreachable: a future nobody sets was awaited")

    async def local(
        self, name: str, fn: Callable[..., T], *args: Any, result_type: Any = None
    ) -> T:
        """Run the database-only fn(conn, *args) in the transaction that journals it.

        Effect and record commit together (unsynced, with any held rows), so a crash leaves
        both or neither, and the step never runs twice. An exception rolls the effect back and
        fails the step.
        """
        (value,) = await self._locals([LocalStep(name, fn, args, result_type)])
        return value  # type: ignore[no-any-return]

    async def locals(self, *steps: LocalStep) -> list[Any]:
        """Several `local` steps in one transaction, so one commit: each is journaled as its own
        step, in order, exactly as if run one by one (a replay matches either way). An
        exception rolls them all back and fails the step that raised."""
        return await self._locals(list(steps))

    async def _locals(self, steps: list[LocalStep]) -> list[Any]:
        results: list[Any] = [None] * len(steps)
        todo: list[tuple[int, LocalStep, int, int, TypeAdapter[Any] | None]] = []
        for i, item in enumerate(steps):
            ordinal, record = self._next(item.name, "do")
            adapter = _result_adapter(item.fn, item.result_type)
            if self._replayed(item.name, ordinal, record):
                results[i] = await self._replay(item.name, ordinal, record, adapter)  # type: ignore[arg-type]
            else:
                todo.append((i, item, ordinal, self._attempt_counts.get(ordinal, 0) + 1, adapter))
        if not todo:
            return results
        self._check_running()
        now, started = self.clock.now(), time.perf_counter()
        current = [todo[0]]  # the step running when an exception comes

        def transaction(conn: Any) -> list[str]:
            encoded = []
            for entry in todo:
                current[0] = entry
                _, item, ordinal, attempt, adapter = entry
                value = item.fn(conn, *item.args)
                if adapter is None and isinstance(value, BaseModel):
                    raise NonRetryable(
                        f"step {item.name!r} returned a {type(value).__name__} but its function "
                        "has no resolvable return annotation; pass result_type= to step.local"
                    )
                encoded.append(self._encode(item.name, value))
                store.record_step(
                    conn,
                    self.instance_id,
                    ordinal,
                    item.name,
                    delivery="local",
                    attempt=attempt,
                    started_at=now,
                    now=self.clock.now(),
                    result=encoded[-1],
                )
            return encoded

        try:
            encoded = await self._write(transaction)
        except Exception as exc:
            _, item, ordinal, attempt, _ = current[0]
            error = self.engine.redact(_error_text(exc))
            await self._write(
                partial(
                    store.record_step,
                    delivery="local",
                    attempt=attempt,
                    started_at=now,
                    status="failed",
                    outcome="failed",
                    error=error,
                ),
                self.instance_id,
                ordinal,
                item.name,
                now=self.clock.now(),
            )
            self._log(item.name, attempt, started, "failed", error=error)
            raise StepFailed(item.name, type(exc).__name__, self.engine.redact(str(exc))) from exc
        for (i, item, _, attempt, adapter), raw in zip(todo, encoded, strict=True):
            self._log(item.name, attempt, started, "complete")
            results[i] = self._decode(raw, adapter)
        return results

    async def _record_attempt(
        self,
        name: str,
        ordinal: int,
        attempt: int,
        delivery: Delivery,
        started_at: float,
        *,
        result: str | None = None,
        error: str | None = None,
    ) -> None:
        """Journal a finished attempt: a result (synced, as it follows an external effect; held
        back if idempotent), or a failure (unsynced: losing it only hides a failed try)."""
        now = self.clock.now()
        failed = error is not None
        if delivery == "at_most_once":
            if failed:
                await self._write(
                    store.end_attempt, self.instance_id, ordinal, attempt, now, "failed", error
                )
            else:
                await self._write(self._complete, ordinal, attempt, result, synced=True)
            return
        row = partial(
            store.record_step,
            delivery=delivery,
            attempt=attempt,
            started_at=started_at,
            now=now,
            status="running" if failed else "complete",
            outcome="failed" if failed else "complete",
            result=result,
            error=error,
        )
        if delivery == "idempotent" and not failed:
            self.pending.add(row, self.instance_id, ordinal, name)
        else:
            await self._write(row, self.instance_id, ordinal, name, synced=not failed)

    def _encode(self, name: str, value: Any) -> str:
        # pydantic-core writes the JSON in one pass (2–3× faster than to_jsonable_python and
        # json.dumps on a turn's history); NaN and ±Infinity stay what json.dumps wrote.
        encoded = to_json(value, inf_nan_mode="constants")
        limit = self.engine.limits.max_step_result_bytes
        if len(encoded) > limit:
            raise LimitExceeded(
                f"result of step {name!r} is {len(encoded)} bytes, over the "
                f"{limit}-byte limit (engine.max_step_result_bytes)"
            )
        return journal_json(encoded.decode(), self.engine.redact, f"step {name!r}")

    @staticmethod
    def _decode(raw: str | None, adapter: TypeAdapter[Any] | None) -> Any:
        if adapter is not None and raw is not None:
            return adapter.validate_json(raw)  # parse and validate in one pass
        value = json.loads(raw) if raw is not None else None
        return adapter.validate_python(value) if adapter is not None else value

    def _complete(self, conn: Any, ordinal: int, attempt: int, encoded: str) -> None:
        now = self.clock.now()
        store.end_attempt(conn, self.instance_id, ordinal, attempt, now, "complete")
        store.finish_step(conn, self.instance_id, ordinal, now, status="complete", result=encoded)

    def _mark_unknown(self, conn: Any, ordinal: int) -> None:
        now = self.clock.now()
        conn.execute(
            "UPDATE workflow_attempts SET outcome = 'unknown', finished_at = ? "
            "WHERE instance_id = ? AND ordinal = ? AND outcome = 'running'",
            (now, self.instance_id, ordinal),
        )
        store.finish_step(
            conn, self.instance_id, ordinal, now, status="unknown", error="outcome unknown"
        )

    def _log(self, name: str, attempt: int, started: float, outcome: str, **extra: Any) -> None:
        level = logging.DEBUG if outcome == "complete" else logging.WARNING
        if not log.isEnabledFor(level):
            return
        log.log(
            level,
            "step",
            extra={
                "instance_id": self.instance_id,
                "key": self.engine.key_of(self.instance_id),
                "step": name,
                "attempt": attempt,
                "outcome": outcome,
                "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                **extra,
            },
        )

    async def sleep(self, name: str, duration: float | timedelta) -> None:
        """Sleep durably: after a restart the instance still wakes at the original time."""
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
        await self._sleep(name, lambda: self.clock.now() + seconds)

    async def sleep_until(self, name: str, when: float | datetime) -> None:
        wake = when.timestamp() if isinstance(when, datetime) else float(when)
        await self._sleep(name, lambda: wake)

    async def _sleep(self, name: str, wake_at: Callable[[], float]) -> None:
        ordinal, record = self._next(name, "sleep")
        if record is not None and record.status == "complete":
            return
        self._check_running()
        if record is None:
            wake = wake_at()
            # Synced: the wake-up time is a promise (R-DUR-4) that must outlive a power loss.
            await self._write(
                store.begin_step,
                self.instance_id,
                ordinal,
                name,
                "sleep",
                self.clock.now(),
                wake_at=wake,
                synced=True,
            )
        else:
            wake = record.wake_at or self.clock.now()
        async with self.engine.suspended(self.instance_id, "sleeping", wake_at=wake):
            await self._sleep_until(wake)
        await self._write(
            store.finish_step,
            self.instance_id,
            ordinal,
            self.clock.now(),
            status="complete",
            result="null",
        )

    async def wait_for_event(
        self,
        event_type: str,
        timeout: float | timedelta,
        *,
        name: str | None = None,
        release_key: bool = False,
    ) -> Event | None:
        """Wait durably for an event of this type; None when the timeout passes first.

        `release_key=True`: the instance's key (its chat) is not held meanwhile, so the key's
        later instances run while this one waits; it takes the key back, after whichever
        instance holds it then, before its next step (the engine's docstring says more)."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        name = name or f"wait:{event_type}"
        ordinal, record = self._next(name, "wait")
        if record is not None and record.status == "complete":
            data = json.loads(record.result or "{}")
            return Event.model_validate(data["event"]) if data.get("event") else None
        self._check_running()
        if record is None:
            deadline = self.clock.now() + seconds
            await self._write(
                store.begin_step,
                self.instance_id,
                ordinal,
                name,
                "wait",
                self.clock.now(),
                wake_at=deadline,
                synced=True,
            )
        else:
            deadline = record.wake_at or self.clock.now()
        wakeup = self.engine.waiter(self.instance_id)
        async with self.engine.suspended(
            self.instance_id,
            "waiting",
            wake_at=deadline,
            waiting_for=event_type,
            release_key=release_key,
        ):
            while True:
                wakeup.clear()
                event = await self._write(
                    store.consume_event, self.instance_id, event_type, ordinal, self.clock.now()
                )
                if event is not None:
                    return Event.model_validate(event)
                remaining = deadline - self.clock.now()
                if remaining <= 0:
                    await self._write(
                        store.finish_step,
                        self.instance_id,
                        ordinal,
                        self.clock.now(),
                        status="complete",
                        result=json.dumps({"event": None, "timed_out": True}),
                    )
                    return None
                sleeper = asyncio.ensure_future(self.clock.sleep(remaining))
                woken = asyncio.ensure_future(wakeup.wait())
                try:
                    with self.engine.blocked(self.instance_id, deadline, wakeup):
                        await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (sleeper, woken):
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
