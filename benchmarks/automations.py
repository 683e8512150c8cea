"""Automations: webhook deliveries accepted per second and the p50 from request to a
committed start, beside a bare aiohttp server in the same run; and the engine's overhead per
step of a user workflow (through AutoStep and the version dispatch) against the turn's (the
durable Step the turn workflow uses directly).

Everything runs in this one process on one event loop (client, server, engine), on a fresh
database with the daemon's settings (WAL, synchronous FULL unless --sync NORMAL).

Rows:
  bare aiohttp             POST /hooks/b: read the body, answer 202 (no verification, no write)
  hook listener            POST /hooks/b through HookServer: size limit, HMAC-SHA256, JSON,
                           input validation, the start committed (fsync'd) before the 202; the
                           engine runs each started instance (one trivial step) meanwhile
  turn path, M steps       N durable workflows × M trivial `step.do` on the engine directly
  automation path, M steps the same steps written as an automation (AutoStep, RawInput, the
                           per-instance version lookup, output validation)
  per step = (T(M steps) − T(0 steps)) / (N·M); per instance = T(0 steps) / N

Usage: .venv/bin/python benchmarks/automations.py [-n 400] [-c 16] [-m 10] [--repeat 3]
       [--sync FULL|NORMAL]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
from aiohttp import web
from pydantic import BaseModel

from agentd.automations import AutoStep, runs, workflow
from agentd.automations.catalog import Catalog
from agentd.automations.hooks import HookServer
from agentd.automations.runtime import Runtime
from agentd.config import AutomationsConfig, Config, HookConfig, HooksConfig, StorageConfig
from agentd.db import Database
from agentd.durable import Engine, Step, SystemClock, store
from agentd.durable import workflow as durable_workflow

SECRET = b"bench-secret-0123456789"


class In(BaseModel):
    n: int = 0
    steps: int = 0


class Out(BaseModel):
    n: int = 0


async def noop(n: int) -> int:
    return n


@workflow("bench_auto", input=In, output=Out, version=1)
async def bench_auto(step: AutoStep, inp: In) -> Out:
    for i in range(inp.steps):
        await step.do(f"s{i}", noop, i)
    return Out(n=inp.n)


TURN_LIKE = "bench_turn"


@durable_workflow(TURN_LIKE)
async def bench_turn(step: Step, inp: In) -> Out:
    for i in range(inp.steps):
        await step.do(f"s{i}", noop, i)
    return Out(n=inp.n)


class _Outbox:  # the benchmark's automations never send
    pass


def _config(sync: str) -> Config:
    route = HookConfig(workflow="bench_auto", secret_env="BENCH")
    hooks = HooksConfig(enabled=True, listen="127.0.0.1:0", routes={"b": route})
    automations = AutomationsConfig(hooks=hooks)
    return Config(automations=automations, storage=StorageConfig(synchronous=sync))  # type: ignore[arg-type]


async def _open(tmp: Path, sync: str) -> tuple[Database, Engine, Runtime]:
    db = await Database.open(tmp / f"bench-{time.monotonic_ns()}.db", synchronous=sync)
    engine = Engine(db, clock=SystemClock(), concurrency=8, poll_interval=0.5)
    catalog = Catalog()
    catalog.add(bench_auto)
    runtime = Runtime(
        config=_config(sync),
        db=db,
        clock=engine.clock,
        catalog=catalog,
        outbox=_Outbox(),
        llm=None,
        kick=engine.kick,
    )  # type: ignore[arg-type]
    engine.register(bench_turn)
    for flow in runtime.workflows():
        engine.register(flow)
    await engine.run()
    return db, engine, runtime


async def _fire(url: str, n: int, concurrency: int) -> tuple[float, list[float]]:
    """n signed POSTs, `concurrency` at a time; (wall seconds, per-request seconds)."""
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)

    async def one(http: aiohttp.ClientSession, i: int) -> None:
        body = json.dumps({"n": i, "steps": 1}).encode()
        sig = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
        headers = {
            "X-Hub-Signature-256": sig,
            "X-Delivery-Id": f"d{i}-{os.getpid()}",
            "Content-Type": "application/json",
        }
        async with gate:
            t0 = time.perf_counter()
            async with http.post(url, data=body, headers=headers) as response:
                await response.read()
                assert response.status == 202, response.status
            latencies.append(time.perf_counter() - t0)

    async with aiohttp.ClientSession(connector=connector) as http:
        started = time.perf_counter()
        await asyncio.gather(*(one(http, i) for i in range(n)))
        return time.perf_counter() - started, latencies


async def bare_server(n: int, concurrency: int) -> tuple[float, list[float]]:
    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"instance_id": "x", "created": True}, status=202)

    app = web.Application()
    app.router.add_post("/hooks/{name}", accept)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        return await _fire(f"http://127.0.0.1:{port}/hooks/b", n, concurrency)
    finally:
        await runner.cleanup()


async def hook_server(tmp: Path, sync: str, n: int, concurrency: int) -> tuple[float, list[float]]:
    db, engine, runtime = await _open(tmp, sync)
    server = HookServer(
        runtime.config, runtime, engine.start, engine.poll_once, env={"BENCH": SECRET.decode()}
    )
    where = await server.start()
    try:
        result = await _fire(f"http://{where}/hooks/b", n, concurrency)
        committed = await db.read(
            lambda c: c.execute("SELECT COUNT(*) FROM workflow_instances").fetchone()[0]
        )
        assert committed == n, committed
        return result
    finally:
        await server.close()
        await engine.wait_idle(120)
        await engine.shutdown()
        await db.close()


async def engine_path(tmp: Path, sync: str, name: str, n: int, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds (this process, all threads) to run n instances created up front in
    one transaction (so only running them is timed: starting is the webhook rows' business)."""
    db, engine, runtime = await _open(tmp, sync)
    ids = [f"{name}-{steps}-{i}" for i in range(n)]

    def create(conn: Any) -> None:
        for i, iid in enumerate(ids):
            if name == TURN_LIKE:
                engine.prepare_start(conn, name, In(n=i, steps=steps), instance_id=iid, key=iid)
            else:
                runs.start(
                    conn,
                    runtime.catalog,
                    name,
                    {"n": i, "steps": steps},
                    instance_id=iid,
                    source="bench",
                    now=time.time(),
                )

    try:
        await db.write(create)
        started, cpu = time.perf_counter(), time.process_time()
        for iid in ids:
            engine.kick(iid)
        await engine.wait_idle(600)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        done = await db.read(
            lambda c: c.execute(
                "SELECT COUNT(*) FROM workflow_instances WHERE status = 'complete'"
            ).fetchone()[0]
        )
        assert done == n, (done, await db.read(store.list_instances))
        return elapsed, cpu
    finally:
        await engine.shutdown()
        await db.close()


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=400, help="deliveries / instances per run")
    parser.add_argument("-c", type=int, default=16, help="concurrent deliveries")
    parser.add_argument("-m", type=int, default=10, help="steps per instance")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sync", default="FULL", choices=["FULL", "NORMAL"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        bare, hooks = [], []
        for _ in range(args.repeat):
            bare.append(await bare_server(args.n, args.c))
            hooks.append(await hook_server(tmp, args.sync, args.n, args.c))
        print(
            f"webhooks: {args.n} deliveries, {args.c} at a time, synchronous={args.sync}, "
            f"median of {args.repeat}"
        )
        rows: dict[str, Any] = {}
        for label, runs in (("bare aiohttp", bare), ("hook listener", hooks)):
            rate = statistics.median(args.n / wall for wall, _ in runs)
            p50 = statistics.median(statistics.median(lat) for _, lat in runs)
            p99 = statistics.median(statistics.quantiles(lat, n=100)[98] for _, lat in runs)
            rows[label] = (rate, p50)
            print(f"  {label:<16} {rate:9.0f} accepted/s   p50 {_ms(p50)}   p99 {_ms(p99)}")
        ratio = rows["bare aiohttp"][0] / rows["hook listener"][0]
        p50 = _ms(rows["hook listener"][1]).strip()
        print(
            f"  the listener accepts {ratio:.1f}x fewer per second than a bare server; "
            f"its p50 (request to committed start) is {p50}"
        )

        print(f"\nengine: {args.n} instances × {args.m} trivial steps, median of {args.repeat}")
        per: dict[str, tuple[float, float, float]] = {}
        labels = (("turn path", TURN_LIKE), ("automation path", "bench_auto"))
        samples: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in labels}
        for r in range(args.repeat):  # alternating order: the box's drift hits both alike
            for label, name in labels if r % 2 == 0 else labels[::-1]:
                zero = await engine_path(tmp, args.sync, name, args.n, 0)
                full = await engine_path(tmp, args.sync, name, args.n, args.m)
                steps = args.n * args.m
                samples[label].append(
                    ((full[0] - zero[0]) / steps, (full[1] - zero[1]) / steps, zero[0] / args.n)
                )
        for label, _ in labels:
            wall, cpu, inst = (statistics.median(x[i] for x in samples[label]) for i in range(3))
            per[label] = (wall, cpu, inst)
            print(
                f"  {label:<16} per step {wall * 1e6:7.1f} µs wall, {cpu * 1e6:7.1f} µs CPU;"
                f"  per instance {inst * 1e6:7.1f} µs wall"
            )
        auto, turn = per["automation path"], per["turn path"]
        print(
            f"  automation / turn: {auto[0] / turn[0]:.2f}x wall and {auto[1] / turn[1]:.2f}x "
            f"CPU per step, {auto[2] / turn[2]:.2f}x wall per instance"
        )


if __name__ == "__main__":
    asyncio.run(main())
