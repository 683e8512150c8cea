"""Journal overhead of the durable engine per `step.do`, against raw one-commit-per-step loops.

Everything runs in this one process, on fresh database files in one directory (so on the same
file system), with the daemon's SQLite settings (agentd.db.connect.open_sync: sqlean/sqlite3,
sqlite-vec loaded, WAL, synchronous=FULL). Every figure is the median of --repeat runs.

Rows (per synchronous mode):

  raw sqlite (no asyncio)   a plain loop on one connection: one INSERT + COMMIT per step
  raw aiosqlite             one `await conn.execute(INSERT)` per step (autocommit: one commit,
                            one thread hop), the aiosqlite loop the issue asks to compare with
  Database.write            `await db.write(fn)` per step: BEGIN IMMEDIATE … COMMIT, one hop
  engine, 0 steps           N workflows with no steps → per-workflow overhead
  engine, M steps           N workflows × M trivial `step.do` calls → per-step overhead is
                            (T(M steps) − T(0 steps)) / (N·M)
  engine, M steps, N keys   the same with N distinct keys (chats), concurrency 8
  engine, M steps, log      the same as "M steps" with the daemon's INFO JSON logging to
                            /dev/null (the daemon logs one line per step)
  engine, M idempotent      N × M `step.do(..., delivery="idempotent")`: rows held back and
                            carried by the workflow's final commit
  engine, M local           N × M `step.local(...)` inserting one row each: effect and
                            journal row in one unsynced commit

Usage: .venv/bin/python benchmarks/engine_overhead.py [-n 200] [-m 10] [--repeat 3]
       [--sync FULL,NORMAL] [--dir DIR] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiosqlite
from pydantic import BaseModel

from agentd.db import Database
from agentd.db.connect import open_sync
from agentd.durable import Engine, Step, SystemClock, workflow

RAW_TABLE = (
    "CREATE TABLE IF NOT EXISTS journal (instance TEXT NOT NULL, ordinal INTEGER NOT NULL, "
    "name TEXT NOT NULL, result TEXT, finished_at REAL, PRIMARY KEY (instance, ordinal))"
)
RAW_INSERT = "INSERT INTO journal (instance, ordinal, name, result, finished_at) VALUES (?,?,?,?,?)"


# CPU seconds the event-loop thread spent in each engine run (SQLite runs on aiosqlite's thread).
LOOP_CPU: list[float] = []


class BenchIn(BaseModel):
    steps: int
    mode: str = "do"  # do | idempotent | local


class BenchOut(BaseModel):
    total: int


async def trivial(i: int) -> int:
    return i


@workflow("bench")
async def bench_wf(step: Step, inp: BenchIn) -> BenchOut:
    total = 0
    for i in range(inp.steps):
        if inp.mode == "local":
            total += await step.local(f"s#{i}", local_insert, step.instance_id, i)
        elif inp.mode == "idempotent":
            total += await step.do(f"s#{i}", trivial, i, delivery="idempotent")
        else:
            total += await step.do(f"s#{i}", trivial, i)
    return BenchOut(total=total)


def local_insert(conn: object, instance: str, i: int) -> int:
    conn.execute(RAW_INSERT, (instance, i, f"s#{i}", str(i), time.time()))  # type: ignore[attr-defined]
    return i


class Run:
    """One fresh database file per measurement, all in the same directory."""

    def __init__(self, root: Path, sync: str) -> None:
        self.root = root
        self.sync = sync
        self.count = 0

    def path(self) -> Path:
        self.count += 1
        return self.root / f"bench-{self.sync.lower()}-{self.count}.db"


def _set_sync(conn: object, sync: str) -> None:
    conn.execute(f"PRAGMA synchronous = {sync}")  # type: ignore[attr-defined]


# -- raw baselines ----------------------------------------------------------------------------


def raw_sync(path: Path, sync: str, steps: int) -> float:
    conn = open_sync(path)
    _set_sync(conn, sync)
    conn.execute(RAW_TABLE)
    started = time.perf_counter()
    for i in range(steps):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(RAW_INSERT, (f"w{i // 10}", i, f"s#{i}", str(i), time.time()))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


async def raw_aiosqlite(path: Path, sync: str, steps: int) -> float:
    conn = aiosqlite.Connection(lambda: open_sync(path), 64)
    await conn
    await conn.execute(f"PRAGMA synchronous = {sync}")
    await conn.execute(RAW_TABLE)
    started = time.perf_counter()
    for i in range(steps):
        value = await trivial(i)
        # open_sync connections are in autocommit mode: this INSERT is its own transaction.
        await conn.execute(RAW_INSERT, (f"w{i // 10}", i, f"s#{i}", str(value), time.time()))
    elapsed = time.perf_counter() - started
    await conn.close()
    return elapsed


async def database_write(path: Path, sync: str, steps: int) -> float:
    db = await Database.open(path)
    await db.read(_set_sync, sync)
    await db.write(lambda c: c.execute(RAW_TABLE))
    started = time.perf_counter()
    for i in range(steps):
        value = await trivial(i)
        await db.write(
            lambda c, i=i, v=value: c.execute(
                RAW_INSERT, (f"w{i // 10}", i, f"s#{i}", str(v), time.time())
            )
        )
    elapsed = time.perf_counter() - started
    await db.close()
    return elapsed


# -- the engine -------------------------------------------------------------------------------


async def engine_run(
    path: Path,
    sync: str,
    n: int,
    m: int,
    *,
    distinct_keys: bool,
    concurrency: int = 8,
    mode: str = "do",
) -> float:
    db = await Database.open(path, synchronous=sync)
    await db.write(lambda c: c.execute(RAW_TABLE))
    engine = Engine(db, clock=SystemClock(), concurrency=concurrency, poll_interval=3600)
    engine.register(bench_wf)
    await engine.run()
    # Warm up (pydantic adapters, statement cache) outside the timing.
    for i in range(3):
        await engine.start("bench", BenchIn(steps=m), instance_id=f"warm-{i}", key="warm")
    await engine.wait_idle(60)
    started, cpu = time.perf_counter(), time.thread_time()
    for i in range(n):
        key = f"chat-{i}" if distinct_keys else "chat"
        await engine.start("bench", BenchIn(steps=m, mode=mode), instance_id=f"wf-{i}", key=key)
    await engine.wait_idle(600)
    elapsed = time.perf_counter() - started
    LOOP_CPU.append(time.thread_time() - cpu)
    done = await db.fetchone(
        "SELECT COUNT(*) FROM workflow_instances WHERE status = 'complete' AND id LIKE 'wf-%'"
    )
    steps = await db.fetchone("SELECT COUNT(*) FROM workflow_steps WHERE instance_id LIKE 'wf-%'")
    await engine.shutdown(grace=1)
    await db.close()
    if done[0] != n or steps[0] != n * m:
        raise RuntimeError(f"expected {n} complete / {n * m} steps, got {done[0]} / {steps[0]}")
    return elapsed


@contextlib.contextmanager
def daemon_logging() -> object:
    """The daemon's logging (INFO, JSON formatter) with stderr pointed at /dev/null."""
    from agentd.runtime.logs import setup_logging
    from agentd.runtime.redact import Redactor

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    devnull = open(os.devnull, "w")
    real_stderr = sys.stderr
    sys.stderr = devnull
    try:
        setup_logging("INFO", "json", Redactor(["secret-token-value"]))
    finally:
        sys.stderr = real_stderr
    try:
        yield
    finally:
        root.handlers[:], root.level = saved
        devnull.close()


# -- reporting --------------------------------------------------------------------------------


def us(seconds: float) -> str:
    return f"{seconds * 1e6:9.1f} µs"


async def measure(root: Path, sync: str, n: int, m: int, repeat: int) -> dict[str, float]:
    """Run every variant once per round (interleaved, so load spikes hit all), then medians."""
    run = Run(root, sync)
    steps = n * m
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "raw_sync",
            "raw_aio",
            "db_write",
            "t0",
            "tm",
            "tk",
            "tl",
            "ti",
            "tc",
            "cpu0",
            "cpum",
        )
    }
    for _ in range(repeat):
        times["raw_sync"].append(raw_sync(run.path(), sync, steps))
        times["raw_aio"].append(await raw_aiosqlite(run.path(), sync, steps))
        times["db_write"].append(await database_write(run.path(), sync, steps))
        times["t0"].append(await engine_run(run.path(), sync, n, 0, distinct_keys=False))
        times["cpu0"].append(LOOP_CPU[-1])
        times["tm"].append(await engine_run(run.path(), sync, n, m, distinct_keys=False))
        times["cpum"].append(LOOP_CPU[-1])
        times["tk"].append(await engine_run(run.path(), sync, n, m, distinct_keys=True))
        with daemon_logging():
            times["tl"].append(await engine_run(run.path(), sync, n, m, distinct_keys=False))
        for key, mode in (("ti", "idempotent"), ("tc", "local")):
            times[key].append(
                await engine_run(run.path(), sync, n, m, distinct_keys=False, mode=mode)
            )
    med = {k: statistics.median(v) for k, v in times.items()}
    t0 = med["t0"]
    return {
        "raw_sync": med["raw_sync"] / steps,
        "raw_aio": med["raw_aio"] / steps,
        "raw_aio_min": min(times["raw_aio"]) / steps,
        "raw_aio_max": max(times["raw_aio"]) / steps,
        "db_write": med["db_write"] / steps,
        "wf": t0 / n,
        "step": (med["tm"] - t0) / steps,
        "step_min": min(t - t0 for t in times["tm"]) / steps,
        "step_max": max(t - t0 for t in times["tm"]) / steps,
        "step_all_in": med["tm"] / steps,
        "step_keys": (med["tk"] - t0) / steps,
        "step_log": (med["tl"] - t0) / steps,
        "step_idem": (med["ti"] - t0) / steps,
        "step_local": (med["tc"] - t0) / steps,
        "wf_total": med["tm"] / n,
        "cpu_wf": med["cpu0"] / n,
        "cpu_step": (med["cpum"] - med["cpu0"]) / steps,
    }


def report(sync: str, n: int, m: int, r: dict[str, float]) -> None:
    raw = r["raw_aio"]
    print(f"\nsynchronous={sync}  ({n} workflows × {m} steps; medians)")
    print(f"  raw sqlite, no asyncio, 1 commit/step     {us(r['raw_sync'])}/step")
    print(
        f"  raw aiosqlite, 1 commit/step (baseline)   {us(raw)}/step"
        f"   (runs {r['raw_aio_min'] * 1e6:.0f}–{r['raw_aio_max'] * 1e6:.0f} µs)"
    )
    print(f"  Database.write, 1 commit/step             {us(r['db_write'])}/step")
    print(f"  engine: per workflow (0 steps)            {us(r['wf'])}/workflow")
    print(
        f"  engine: per step.do                       {us(r['step'])}/step"
        f"   ratio vs raw aiosqlite {r['step'] / raw:5.2f}×"
        f"   (runs {r['step_min'] * 1e6:.0f}–{r['step_max'] * 1e6:.0f} µs)"
    )
    print(f"    beyond its 1 commit (− 1 × Database.write)  {us(r['step'] - r['db_write'])}/step")
    print(
        f"    of which event-loop thread CPU          {us(r['cpu_step'])}/step"
        f"   ({us(r['cpu_wf']).strip()}/workflow)"
    )
    print(
        f"  engine: all-in (incl. workflow cost)      {us(r['step_all_in'])}/step"
        f"   ratio {r['step_all_in'] / raw:5.2f}×   ({r['wf_total'] * 1e3:.2f} ms/workflow)"
    )
    print(
        f"  engine: per step.do, {n} keys, conc. 8     {us(r['step_keys'])}/step"
        f"   ratio {r['step_keys'] / raw:5.2f}×"
    )
    print(
        f"  engine: per step.do, INFO JSON logging    {us(r['step_log'])}/step"
        f"   ratio {r['step_log'] / raw:5.2f}×"
    )
    print(
        f"  engine: per idempotent step.do            {us(r['step_idem'])}/step"
        f"   ratio {r['step_idem'] / raw:5.2f}×"
    )
    print(
        f"  engine: per step.local (1 INSERT)         {us(r['step_local'])}/step"
        f"   ratio {r['step_local'] / raw:5.2f}×"
    )


async def profile(root: Path, n: int, m: int) -> None:
    run = Run(root, "FULL")
    prof = cProfile.Profile()
    prof.enable()
    await engine_run(run.path(), "FULL", n, m, distinct_keys=False)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).sort_stats("tottime")
    stats.print_stats(25)
    print("\nProfile of the event-loop thread (engine, synchronous=FULL), top 25 by tottime:")
    print(buf.getvalue())


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", "--workflows", type=int, default=200)
    ap.add_argument("-m", "--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    ap.add_argument("--sync", default="FULL,NORMAL", help="synchronous modes, comma-separated")
    ap.add_argument("--dir", type=Path, default=None, help="where the database files go")
    ap.add_argument("--profile", action="store_true", help="also cProfile one engine run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentd-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        print(f"agentd engine overhead — databases in {root}")
        probe = open_sync(root / "probe.db")
        version = probe.execute("select sqlite_version()").fetchone()[0]
        print(
            f"python {sys.version.split()[0]}, SQLite {version} via {type(probe).__module__}, "
            f"nproc {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} at start, "
            f"{args.repeat} interleaved rounds"
        )
        probe.close()
        started = time.perf_counter()
        for sync in [s.strip().upper() for s in args.sync.split(",") if s.strip()]:
            r = await measure(root, sync, args.workflows, args.steps, args.repeat)
            report(sync, args.workflows, args.steps, r)
        print(
            "\nEngine per step.do (at least once) = 1 synced commit (result + step + attempt);"
            "\nper idempotent step.do = no commit of its own (carried by the next one);"
            "\nper step.local = 1 unsynced commit (effect + step + attempt);"
            "\nper workflow = 1 synced commit (start), 2 unsynced (running, finish), 2 reads."
            "\nBar (DESIGN.md): DBOS / LangGraph spend 3–5 ms per step on SQLite."
        )
        if args.profile:
            await profile(root, args.workflows, args.steps)
        print(f"\n(total {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    asyncio.run(main())
