"""Run one parse of outside data in a child process with resource limits and a time budget.

Why a fresh process per parse and not a pool: a parse that blows its budget must be killed,
and killing a pooled worker breaks the pool for everyone. Python starts in well under 0.1 s,
small next to a web fetch or a model call.

The child gets the job on stdin (a JSON header line, then the raw bytes) and answers JSON on
stdout, never pickle: if a parser were subverted by its input, the parent still only reads
data. Its environment is stripped so secrets never reach a process that reads hostile bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import asdict
from typing import Any

from agentd.parsing.budget import Budget, Lane, ParseFailed

# A target is "agentd.module:function"; nothing outside agentd can be named.
_PREFIX = "agentd."
# At most this many children at once per lane: the machine has few cores and the loop needs
# one; a short one (at most two seconds of CPU) may run beside two parses.
_MAX_CHILDREN: dict[Lane, int] = {"parse": 2, "short": 1}
_semaphores: dict[tuple[int, Lane], asyncio.Semaphore] = {}


def _semaphore(lane: Lane) -> asyncio.Semaphore:
    key = (id(asyncio.get_running_loop()), lane)
    sem = _semaphores.get(key)
    if sem is None:
        sem = _semaphores[key] = asyncio.Semaphore(_MAX_CHILDREN[lane])
    return sem


def _child_env() -> dict[str, str]:
    # Only what Python needs to start and find agentd; no tokens, keys or proxies.
    keep = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "SYSTEMROOT", "VIRTUAL_ENV")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _describe_death(returncode: int, budget: Budget, stderr: bytes) -> ParseFailed:
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return ParseFailed(
            f"the parser used more than its {budget.cpu_seconds} s of CPU", kind="limit"
        )
    tail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    if "MemoryError" in tail[0]:
        return ParseFailed("the parser ran out of its memory budget", kind="limit")
    return ParseFailed(
        f"the parser crashed (exit {returncode}) {tail[0][:200]}".strip(), kind="crash"
    )


async def _read_capped(stream: asyncio.StreamReader, cap: int, what: str) -> bytes:
    """Read to EOF, refusing past `cap` bytes: the child's answer is outside data too."""
    chunks: list[bytes] = []
    total = 0
    while chunk := await stream.read(65536):
        total += len(chunk)
        if total > cap:
            raise ParseFailed(f"the parser's {what} passed {cap} bytes", kind="limit")
        chunks.append(chunk)
    return b"".join(chunks)


async def _exchange(
    proc: asyncio.subprocess.Process, job: bytes, budget: Budget
) -> tuple[bytes, bytes]:
    """Send the job and read both pipes at once (a child blocked on a full stderr pipe would
    otherwise never finish its stdout), each capped."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    async def feed() -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(job)
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child died or refused; its exit status says why
        finally:
            proc.stdin.close()

    # A TaskGroup: when one pipe passes its cap, the other readers stop too, so the pipes can
    # be drained below without two readers on one stream.
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(feed())
            out = tasks.create_task(_read_capped(proc.stdout, budget.answer_bytes, "answer"))
            err = tasks.create_task(_read_capped(proc.stderr, 65536, "error output"))
    except BaseExceptionGroup as group:
        failed = next((e for e in group.exceptions if isinstance(e, ParseFailed)), None)
        if failed is None:
            raise
        raise failed from None
    await proc.wait()
    return out.result(), err.result()


async def _drain(proc: asyncio.subprocess.Process) -> None:
    """Read what is left in the pipes: a pipe left full keeps `wait()` from ever returning
    (asyncio waits for every pipe to close), and the child is dead, so this ends at once."""
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            while await stream.read(65536):
                pass


async def run_bounded(target: str, data: bytes, budget: Budget | None = None, **kwargs: Any) -> Any:
    """`target(data, **kwargs)` in a limited child process; its JSON result, or ParseFailed.

    The target is `"agentd.pkg.module:function"`; it must return JSON-able data and raise
    to refuse the input (its exception's type and message become the ParseFailed message).
    """
    if not target.startswith(_PREFIX) or ":" not in target:
        raise ValueError(f"not an agentd parse target: {target!r}")
    budget = budget or Budget()
    header = json.dumps({"target": target, "kwargs": kwargs, "budget": asdict(budget)})
    async with _semaphore(budget.lane):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentd.parsing.child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_child_env(),
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(budget.seconds):
                out, err = await _exchange(proc, header.encode() + b"\n" + data, budget)
        except TimeoutError:
            raise ParseFailed(
                f"the parser took longer than {budget.seconds:g} s", kind="limit"
            ) from None
        finally:
            if proc.returncode is None:
                proc.kill()
                await _drain(proc)
                await proc.wait()
    if proc.returncode != 0:
        raise _describe_death(proc.returncode or 0, budget, err)
    try:
        answer = json.loads(out)
    except ValueError:
        raise ParseFailed("the parser gave no readable answer", kind="crash") from None
    if "error" in answer:
        if answer.get("limit"):
            raise ParseFailed(str(answer["error"]), kind="limit")
        raise ParseFailed(str(answer["error"]), error_type=str(answer.get("type", "")))
    return answer["result"]
