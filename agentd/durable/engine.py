"""The durable engine: starts, schedules, resumes and finishes workflow instances.

Instances with the same key (a chat) run one at a time in creation order; different keys run
concurrently up to `concurrency`. A waiting or sleeping instance gives its concurrency slot
back but keeps its key, so a chat's turns never overtake each other — unless its wait says
`release_key`: then the key's next instances run meanwhile, and the waiting instance takes the
key again (after whichever instance holds it now) before its next step. Nothing of that is
state of its own: after a restart the waiting instance, the oldest open one of its key, replays
up to its wait and lets the key go again, so the journal alone decides the order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from agentd.db import Database
from agentd.durable import store
from agentd.durable.clock import Clock, SystemClock
from agentd.durable.errors import (
    DivergenceError,
    InvalidInput,
    LimitExceeded,
    Suspended,
    WorkflowNotFound,
)
from agentd.durable.host import Limits
from agentd.durable.step import Step, journal_json

I = TypeVar("I", bound=BaseModel)  # noqa: E741
O = TypeVar("O", bound=BaseModel)  # noqa: E741
T = TypeVar("T")
log = logging.getLogger("agentd.durable")
RECONCILE_EVERY = 10
# How long `cancel` waits for a stopped instance's task to end: its stop path is a commit or
# two; a step that ignores the cancel for longer (a shielded wait) is not waited for.
STOP_WAIT = 5.0
# What `cancel` answers when the stopped task had not ended by then: what its stop path writes
# is not committed yet.
STOPPING = "stopping"


@dataclass(frozen=True)
class Workflow(Generic[I, O]):
    """A named async function `fn(step, input) -> output` with pydantic input and output."""

    name: str
    fn: Callable[[Step, I], Awaitable[O]]
    input_model: type[I]
    output_model: type[O]


def workflow(name: str) -> Callable[[Callable[[Step, Any], Awaitable[Any]]], Workflow[Any, Any]]:
    """Declare a workflow; its input and output models come from the annotations."""

    def wrap(fn: Callable[[Step, Any], Awaitable[Any]]) -> Workflow[Any, Any]:
        hints = typing.get_type_hints(fn)
        params = [p for p in hints if p != "return"]
        if len(params) != 2:
            raise TypeError(f"workflow {name}: expected `async def f(step, inp: Model) -> Model`")
        inp, out = hints[params[1]], hints.get("return")
        for model in (inp, out):
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise TypeError(f"workflow {name}: input and output must be pydantic models")
        return Workflow(name=name, fn=fn, input_model=inp, output_model=out)

    return wrap


class StartResult(BaseModel):
    instance_id: str
    created: bool


class Engine:
    def __init__(
        self,
        db: Database,
        *,
        clock: Clock | None = None,
        concurrency: int = 8,
        limits: Limits | None = None,
        poll_interval: float = 0.5,
        redact: Callable[[str], str] = lambda text: text,
        on_finish: Callable[[store.InstanceRecord], Awaitable[None]] | None = None,
        crash_limit: int = 3,
    ) -> None:
        self.db = db
        self.redact = redact  # errors are journaled: no secret may ride along
        self._on_finish = on_finish
        # An instance found at the same step this many process deaths in a row is parked.
        self.crash_limit = crash_limit
        # Instances that were running when the last process died run one at a time (below).
        self._suspects: set[str] = set()
        self._suspect_lock = asyncio.Lock()
        self._suspect_holder: str | None = None
        self.clock: Clock = clock or SystemClock()
        self.limits = limits or Limits()
        self.stopping = False
        self._poll_interval = poll_interval
        self._slots = asyncio.Semaphore(concurrency)
        self._holding: set[str] = set()
        self._workflows: dict[str, Workflow[Any, Any]] = {}
        self._runners: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._keys: dict[str, str] = {}
        self._cancelling: set[str] = set()
        self._waiters: dict[str, asyncio.Event] = {}
        # What each parked instance waits for: its wake-up time and, for an event, its waiter.
        self._blocked: dict[str, tuple[float, asyncio.Event | None]] = {}
        self._poller: asyncio.Task[None] | None = None
        # Each key's order: held by the instance that runs for the key now (its runner takes
        # it before picking the next instance; a `release_key` wait gives it back meanwhile).
        self._key_locks: dict[str, asyncio.Lock] = {}
        self._key_held: dict[str, asyncio.Lock] = {}
        self._live: dict[str, str] = {}  # instances with a run in this process: their keys
        self._released: set[str] = set()  # waiting with their key given back
        self._runs: set[asyncio.Task[None]] = set()

    # -- registration and starting -------------------------------------------------------

    def register(self, wf: Workflow[Any, Any]) -> None:
        self._workflows[wf.name] = wf

    def _validated_input(self, workflow_name: str, inp: BaseModel | dict[str, Any]) -> str:
        wf = self._workflows.get(workflow_name)
        if wf is None:
            raise WorkflowNotFound(f"no workflow named {workflow_name!r} is registered")
        try:
            model = wf.input_model.model_validate(
                inp.model_dump() if isinstance(inp, BaseModel) else inp
            )
        except ValidationError as exc:
            raise InvalidInput(f"invalid input for workflow {workflow_name}: {exc}") from None
        raw = model.model_dump_json()
        if len(raw) > self.limits.max_input_bytes:
            raise LimitExceeded(
                f"input of {workflow_name} is {len(raw)} bytes, over {self.limits.max_input_bytes}"
            )
        return raw

    def prepare_start(
        self,
        conn: Any,
        workflow_name: str,
        inp: BaseModel | dict[str, Any],
        *,
        instance_id: str,
        key: str,
    ) -> bool:
        """Create an instance inside the caller's transaction; call `kick(key)` after commit."""
        raw = self._validated_input(workflow_name, inp)
        return store.insert_instance(
            conn,
            instance_id=instance_id,
            workflow=workflow_name,
            key=key,
            input_json=raw,
            now=self.clock.now(),
        )

    async def start(
        self,
        workflow_name: str,
        inp: BaseModel | dict[str, Any],
        *,
        instance_id: str,
        key: str | None = None,
    ) -> StartResult:
        """Start an instance; starting the same instance id again starts nothing (R-DUR-6)."""
        key = key or instance_id
        created = await self.db.write(
            lambda conn: self.prepare_start(
                conn, workflow_name, inp, instance_id=instance_id, key=key
            )
        )
        self.kick(key)
        return StartResult(instance_id=instance_id, created=created)

    # -- events, cancel, retry ------------------------------------------------------------

    async def send_event(
        self,
        instance_id: str,
        event_type: str,
        payload: dict[str, Any] | None = None,
        *,
        event_id: str | None = None,
    ) -> bool:
        """Put an event in the instance's durable mailbox; False if event_id was seen before."""
        stored = await self.db.write(
            store.insert_event, instance_id, event_type, payload or {}, self.clock.now(), event_id
        )
        if instance_id in self._waiters:
            self._waiters[instance_id].set()
        return stored

    async def cancel(self, instance_id: str) -> str:
        """Flag the instance cancelled and, if it runs here, stop its task and wait (at most
        STOP_WAIT) for it to end: what its stop path writes (a stopped model call's usage row)
        is committed by then, so a stop said done is done, even if the process dies next.
        STOPPING when the task had not ended by then, so the caller does not say it is done."""
        status = await self.db.write(store.request_cancel, instance_id, self.clock.now())
        task = self._tasks.get(instance_id)
        if status == "cancel_requested" and task is not None:
            self._cancel_task(instance_id)
            if task is not asyncio.current_task():
                ended, _ = await asyncio.wait({task}, timeout=STOP_WAIT)
                return status if ended else STOPPING
        return status

    def stop_flagged(self, instance_id: str) -> None:
        """End at once the task of an instance whose cancel flag the caller has just committed.

        No second write first: while it waited its turn at the writer, the instance could take
        its next step (a tool's effect) after the flag, as nothing but marked effects read it."""
        if instance_id in self._tasks and instance_id not in self._cancelling:
            self._cancel_task(instance_id)

    async def retry(self, instance_id: str) -> None:
        await self.db.write(store.reset_for_retry, instance_id, self.clock.now())
        inst = await self.db.read(store.get_instance, instance_id)
        self.kick(inst.key)

    def cancelled_from_inside(self, instance_id: str) -> None:
        """The instance's own task found its cancel flag (a step refused to begin): it ends
        as cancelled by request, as if the runner had cancelled it."""
        if instance_id in self._tasks and instance_id not in self._cancelling:
            self._cancel_task(instance_id)
        self._cancelling.add(instance_id)

    def _cancel_task(self, instance_id: str) -> None:
        self._cancelling.add(instance_id)
        self._tasks[instance_id].cancel()

    # -- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Resume every unfinished instance and watch for work from other processes.

        First, if the last process died while instances ran, a step that was running each of
        the last `crash_limit` deaths is parked (errored) instead of run to its death again.
        """
        await self._park_crash_loops()
        keys = await self.db.read(store.open_keys)
        for key in keys:
            self.kick(key)
        log.info("engine started", extra={"resumed_keys": len(keys)})
        self._poller = asyncio.create_task(self._poll())

    async def _park_crash_loops(self) -> None:
        def account(conn: Any) -> tuple[list[str], list[str]]:
            if not store.note_engine_start(conn, self.clock.now()):
                return [], []
            return store.count_crashes(conn, self.clock.now(), self.crash_limit)

        parked, suspects = await self.db.write(account)
        self._suspects.update(suspects)
        for instance_id in parked:
            inst = await self.db.read(store.get_instance, instance_id)
            extra = {"instance_id": inst.id, "key": inst.key, "workflow": inst.workflow}
            log.error("workflow parked", extra={**extra, "error": inst.error})
            if self._on_finish is not None:
                try:
                    await self._on_finish(inst)  # the daemon tells the chat (once: it is final)
                except Exception:
                    log.exception("on_finish hook failed", extra={"instance_id": inst.id})

    def kick(self, key: str) -> None:
        """Make sure a runner works through the key's open instances."""
        if self.stopping:
            return
        self._dirty.add(key)
        if key not in self._runners:
            self._runners[key] = asyncio.create_task(self._run_key(key), name=f"key:{key}")

    def key_of(self, instance_id: str) -> str | None:
        return self._keys.get(instance_id)

    def _key_lock(self, key: str) -> asyncio.Lock:
        return self._key_locks.setdefault(key, asyncio.Lock())

    async def _run_key(self, key: str) -> None:
        """Hand the key's open instances, oldest first, one at a time to runs of their own:
        the next one only once the key is free again (its instance finished, or let go of
        the key while it waits)."""
        lock = self._key_lock(key)
        try:
            while not self.stopping:
                self._dirty.discard(key)
                await lock.acquire()
                handed = False
                try:
                    if self.stopping:
                        return
                    skip = tuple(i for i, k in self._live.items() if k == key)
                    inst = await self.db.read_inline(store.next_open_for_key, key, skip)
                    if inst is None:
                        if key in self._dirty:
                            continue
                        return
                    self._live[inst.id] = key
                    self._key_held[inst.id] = lock
                    run = asyncio.create_task(self._run_instance(inst), name=f"run:{inst.id}")
                    self._runs.add(run)
                    run.add_done_callback(self._runs.discard)
                    handed = True
                finally:
                    if not handed:
                        lock.release()
        finally:
            self._runners.pop(key, None)

    async def _run_instance(self, inst: store.InstanceRecord) -> None:
        try:
            await self._execute(inst)
        except Exception as exc:  # an engine bug must not wedge the chat forever
            log.exception("engine failed running %s", inst.id)
            try:
                await self._finish(inst.id, "errored", error=f"engine error: {exc}"[:4000])
            except Exception:
                # Left open: skipped here until the reconcile poll's next look, not retried
                # in a tight loop.
                self._give_back_key(inst.id)
                await asyncio.sleep(self._poll_interval * RECONCILE_EVERY)
        finally:
            self._live.pop(inst.id, None)
            self._give_back_key(inst.id)

    def _give_back_key(self, instance_id: str) -> None:
        lock = self._key_held.pop(instance_id, None)
        if lock is not None:
            lock.release()

    async def _take_key_again(self, instance_id: str, key: str) -> None:
        """After a `release_key` wait: back in the key's order before the next step."""
        lock = self._key_lock(key)
        await lock.acquire()
        self._key_held[instance_id] = lock

    async def _finish(
        self, instance_id: str, status: str, step: Step | None = None, **fields: Any
    ) -> None:
        """Record the final status, with the rows the instance's steps still hold back.

        Unsynced: losing it to a power loss only makes the instance replay its journal.
        """
        if self.stopping and status != "complete" and status != "errored":
            return
        if fields.get("error"):
            fields["error"] = self.redact(fields["error"])
        args = (store.set_status, instance_id, status, self.clock.now())
        if step is None:
            await self.db.write_unsynced(*args, **fields)
        else:
            await step.pending.write(self.db.write_unsynced, *args, **fields)
        if self._on_finish is not None and status != "complete":
            try:
                await self._on_finish(await self.db.read(store.get_instance, instance_id))
            except Exception:
                log.exception("on_finish hook failed", extra={"instance_id": instance_id})

    async def _execute(self, inst: store.InstanceRecord) -> None:
        if inst.id not in self._suspects:
            await self._execute_now(inst)
            return
        # Running when the process died: alone among such, so that if it kills the process
        # again, it is the only one charged with it (until it lets go of its key to wait: by
        # then it got past where it was).
        await self._suspect_lock.acquire()
        self._suspect_holder = inst.id
        try:
            await self._execute_now(inst)
        finally:
            self._suspects.discard(inst.id)
            self._free_suspect_lock(inst.id)

    def _free_suspect_lock(self, instance_id: str) -> None:
        if self._suspect_holder == instance_id:
            self._suspect_holder = None
            self._suspect_lock.release()

    async def _execute_now(self, inst: store.InstanceRecord) -> None:
        if inst.cancel_requested:
            await self._finish(inst.id, "cancelled", error="cancelled")
            return
        wf = self._workflows.get(inst.workflow)
        if wf is None:
            await self._finish(inst.id, "errored", error=f"no workflow named {inst.workflow!r}")
            return
        try:
            inp = wf.input_model.model_validate_json(inst.input)
        except ValidationError as exc:
            await self._finish(inst.id, "errored", error=f"stored input is invalid: {exc}")
            return
        await self._acquire(inst.id)
        started = time.perf_counter()
        self._keys[inst.id] = inst.key
        try:
            # One hop: the journal is read in the transaction that marks the instance running.
            taken = await self.db.write_unsynced(_take, inst.id, self.clock.now())
            if taken is None:
                current = await self.db.read(store.get_instance, inst.id)
                if current.status not in store.FINAL_STATUSES:
                    await self._finish(inst.id, "cancelled", error="cancelled by request")
                return
            journal, attempts = taken
            step = Step(self, inst.id, journal, attempts, retries=inst.retries)
            # A resumed run is worth a line at INFO; a fresh start is, with its steps, DEBUG:
            # "workflow complete" says a turn happened (per-line JSON logging was ~8 % of a
            # turn's CPU at INFO; the journal has every step's times).
            log.log(
                logging.INFO if journal else logging.DEBUG,
                "workflow start",
                extra={
                    "instance_id": inst.id,
                    "key": inst.key,
                    "workflow": inst.workflow,
                    "resumed": bool(journal),
                },
            )
            task = asyncio.create_task(wf.fn(step, inp), name=f"wf:{inst.id}")
            self._tasks[inst.id] = task
            await self._await_instance(inst, wf, task, step, started)
        finally:
            self._release(inst.id)
            self._tasks.pop(inst.id, None)
            self._keys.pop(inst.id, None)
            self._waiters.pop(inst.id, None)
            self._cancelling.discard(inst.id)
            self._released.discard(inst.id)

    async def _await_instance(
        self,
        inst: store.InstanceRecord,
        wf: Workflow[Any, Any],
        task: asyncio.Task[Any],
        step: Step,
        started: float,
    ) -> None:
        extra = {"instance_id": inst.id, "key": inst.key, "workflow": inst.workflow}
        try:
            result = await task
            output = wf.output_model.model_validate(
                result.model_dump() if isinstance(result, BaseModel) else result
            )
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            if inst.id in self._cancelling:
                await self._finish(
                    inst.id, step=step, status="cancelled", error="cancelled by request"
                )
                log.info("workflow cancelled", extra=extra)
            elif not self.stopping:
                # Nobody cancelled it: its own code raised CancelledError. Running it again
                # would loop forever, so it ends here, visibly.
                await self._finish(
                    inst.id, "errored", step, error="the workflow was cancelled from inside"
                )
                log.warning("workflow errored", extra={**extra, "error": "CancelledError"})
            return  # shutdown: the instance stays open and resumes at the next start
        except Suspended:
            log.info("workflow suspended for shutdown", extra=extra)
            return
        except (DivergenceError, LimitExceeded, Exception) as exc:
            error = f"{type(exc).__name__}: {exc}"
            await self._finish(inst.id, step=step, status="errored", error=error[:4000])
            log.warning("workflow errored", extra={**extra, "error": error[:500]})
            if not isinstance(exc, DivergenceError | LimitExceeded):
                log.debug("workflow traceback", exc_info=exc, extra=extra)
            return
        what = f"workflow {inst.workflow!r}"
        journaled = journal_json(output.model_dump_json(), self.redact, what)
        await self._finish(inst.id, step=step, status="complete", output=journaled)
        log.info(
            "workflow complete",
            extra={**extra, "duration_ms": round((time.perf_counter() - started) * 1000, 2)},
        )

    # -- concurrency slots and suspension -------------------------------------------------

    async def _acquire(self, instance_id: str) -> None:
        if instance_id not in self._holding:
            await self._slots.acquire()
            self._holding.add(instance_id)

    def _release(self, instance_id: str) -> None:
        if instance_id in self._holding:
            self._holding.discard(instance_id)
            self._slots.release()

    def waiter(self, instance_id: str) -> asyncio.Event:
        return self._waiters.setdefault(instance_id, asyncio.Event())

    @contextlib.contextmanager
    def blocked(
        self, instance_id: str, until: float, wakeup: asyncio.Event | None = None
    ) -> typing.Iterator[None]:
        """Mark the instance as parked until `until` (or `wakeup`), for `settled`."""
        self._blocked[instance_id] = (until, wakeup)
        try:
            yield
        finally:
            self._blocked.pop(instance_id, None)

    def _quiet(self) -> bool:
        """True when nothing in this process can move without time passing or an event."""
        now = self.clock.now()
        busy = set(self._runners)
        for instance_id in self._tasks:
            until, wakeup = self._blocked.get(instance_id, (now, None))
            if until <= now or (wakeup is not None and wakeup.is_set()):
                return False
            if instance_id not in self._released:  # else its key's runner is free to move
                busy.discard(self._keys.get(instance_id, ""))
        return not busy

    @asynccontextmanager
    async def suspended(
        self,
        instance_id: str,
        status: str,
        *,
        wake_at: float | None = None,
        waiting_for: str | None = None,
        release_key: bool = False,
    ) -> AsyncIterator[None]:
        """Mark the instance sleeping/waiting and free its slot while the body awaits; with
        `release_key`, free its key too, and take it back (in turn) when the body is done."""
        await self.db.write_unsynced(
            store.set_status,
            instance_id,
            status,
            self.clock.now(),
            wake_at=wake_at,
            waiting_for=waiting_for,
        )
        self._release(instance_id)
        if release_key and instance_id in self._key_held:
            self._released.add(instance_id)
            self._give_back_key(instance_id)
            self._free_suspect_lock(instance_id)
        yield
        if instance_id in self._released:
            await self._take_key_again(instance_id, self._keys[instance_id])
            self._released.discard(instance_id)
        await self._acquire(instance_id)
        await self.db.write_unsynced(store.set_status, instance_id, "running", self.clock.now())

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.db.write(fn, *args, **kwargs)

    async def write_unsynced(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.db.write_unsynced(fn, *args, **kwargs)

    # -- cross-process work and shutdown --------------------------------------------------

    async def _poll(self) -> None:
        # The CLI writes events, cancels and retries through its own connection; data_version
        # changes only when another connection commits, so an idle poll costs one pragma.
        last_version = None
        polls = 0
        while not self.stopping:
            await asyncio.sleep(self._poll_interval)
            polls += 1
            try:
                version = await self.db.read(
                    lambda c: c.execute("PRAGMA data_version").fetchone()[0]
                )
                # Every RECONCILE_EVERY polls look anyway: a cancel seen before its task
                # existed, or a key whose runner died, is picked up again.
                if version == last_version and polls % RECONCILE_EVERY:
                    continue
                await self.poll_once()
                last_version = version
            except Exception:
                log.exception("engine poll failed; will try again")

    async def poll_once(self) -> None:
        pending, cancels, keys = await self.db.read(
            lambda c: (
                store.instances_with_pending_events(c),
                store.cancel_requested_ids(c),
                store.open_keys(c),
            )
        )
        for instance_id in pending & self._waiters.keys():
            self._waiters[instance_id].set()
        for instance_id in cancels & self._tasks.keys():
            if instance_id not in self._cancelling:
                self._cancel_task(instance_id)
        for key in keys:
            if key not in self._runners:
                self.kick(key)

    async def wait_idle(self, timeout: float = 10.0) -> None:
        """Return once no instance is running in this process (for tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        while self._runners or self._runs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"engine still busy with {sorted(self._runners)}")
            await asyncio.sleep(0.005)

    async def settled(self, timeout: float = 10.0) -> None:
        """Return once every instance of this process is parked on a time still ahead or an
        event not yet sent: on a FakeClock, all that the last advance made due has been done.

        Tests and benchmarks call it after moving a FakeClock instead of sleeping a while and
        hoping the engine kept up, which a busy machine does not.
        """
        deadline = time.monotonic() + timeout
        quiet = 0
        while quiet < 2:  # twice in a row: a woken task may not have run yet the first time
            await asyncio.sleep(0.002)
            quiet = quiet + 1 if self._quiet() else 0
            if time.monotonic() > deadline:
                raise TimeoutError(f"engine still busy with {sorted(self._runners)}")

    async def wait_for(self, instance_id: str, timeout: float = 10.0) -> store.InstanceRecord:
        """Wait until the instance reaches a final status, and return it."""
        deadline = time.monotonic() + timeout
        while True:
            inst = await self.db.read(store.get_instance, instance_id)
            if inst.status in store.FINAL_STATUSES:
                return inst
            if time.monotonic() > deadline:
                raise TimeoutError(f"{instance_id} is still {inst.status}")
            await asyncio.sleep(0.01)

    async def shutdown(self, grace: float = 10.0, hurry: asyncio.Event | None = None) -> None:
        """Stop taking work; let running steps finish for `grace` seconds (or until `hurry` is
        set: a second Ctrl-C), then cancel.

        Instances left unfinished keep their journal and status, and resume at the next start.
        """
        self.stopping = True
        if self._poller:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        # Waiting and sleeping instances have nothing in flight: stop them at once.
        for instance_id, task in list(self._tasks.items()):
            if instance_id not in self._holding:
                task.cancel()
        runners = [*self._runners.values(), *self._runs]
        if runners:
            if self._holding:
                log.warning(
                    f"stopping: waiting up to {grace:g} s for the step(s) running in "
                    f"{', '.join(sorted(self._holding))} to finish; stop again (Ctrl-C) to "
                    "stop now, they resume at the next start",
                    extra={"running": sorted(self._holding), "grace": grace},
                )
            still = await self._wait_for(runners, grace, hurry)
            for task in still:
                task.cancel()
            await asyncio.gather(*still, return_exceptions=True)
        # A clean stop: instances left running were not what killed the process.
        with contextlib.suppress(Exception):
            await self.db.write(store.note_engine_stop)
        log.info("engine stopped")

    @staticmethod
    async def _wait_for(
        runners: list[asyncio.Task[None]], grace: float, hurry: asyncio.Event | None
    ) -> set[asyncio.Task[None]]:
        """The runners still going after `grace`, or as soon as `hurry` is set."""
        hurried = asyncio.ensure_future(hurry.wait()) if hurry is not None else None
        waiting: set[asyncio.Future[Any]] = set(runners)
        try:
            deadline = asyncio.get_running_loop().time() + grace
            while waiting - {hurried}:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                group = waiting | ({hurried} if hurried is not None else set())
                done, _ = await asyncio.wait(
                    group, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                if hurried is not None and hurried in done:
                    log.warning("stopping now: unfinished steps resume at the next start")
                    break
                waiting -= done
        finally:
            if hurried is not None:
                hurried.cancel()
        return {t for t in runners if not t.done()}


def _take(
    conn: Any, instance_id: str, now: float
) -> tuple[dict[int, store.StepRecord], list[store.AttemptRecord]] | None:
    """Mark an open instance running and return its journal; None if it was not open."""
    if not store.mark_running(conn, instance_id, now):
        return None
    return store.load_steps(conn, instance_id), store.load_attempts(conn, instance_id)
