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

from agentd.parsing.budget import Budget, ParseFailed

# A target is "agentd.module:function"; nothing outside agentd can be named.
_PREFIX = "agentd."
# At most this many parses at once: the machine has few cores and the loop needs one.
_MAX_CHILDREN = 2
_semaphores: dict[int, asyncio.Semaphore] = {}


def _semaphore() -> asyncio.Semaphore:
    loop_id = id(asyncio.get_running_loop())
    sem = _semaphores.get(loop_id)
    if sem is None:
        sem = _semaphores[loop_id] = asyncio.Semaphore(_MAX_CHILDREN)
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


async def run_bounded(target: str, data: bytes, budget: Budget | None = None, **kwargs: Any) -> Any:
    """`target(data, **kwargs)` in a limited child process; its JSON result, or ParseFailed.

    The target is `"agentd.pkg.module:function"`; it must return JSON-able data and raise
    to refuse the input (its exception's type and message become the ParseFailed message).
    """
    if not target.startswith(_PREFIX) or ":" not in target:
        raise ValueError(f"not an agentd parse target: {target!r}")
    budget = budget or Budget()
    header = json.dumps({"target": target, "kwargs": kwargs, "budget": asdict(budget)})
    async with _semaphore():
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
                out, err = await proc.communicate(header.encode() + b"\n" + data)
        except TimeoutError:
            raise ParseFailed(
                f"the parser took longer than {budget.seconds:g} s", kind="limit"
            ) from None
        finally:
            if proc.returncode is None:
                proc.kill()
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
