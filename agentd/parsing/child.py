"""The child side of run_bounded: set the limits first, then read the job and run it.

Run as `python -m agentd.parsing.child`; never imported by the daemon.
"""

from __future__ import annotations

import importlib
import json
import resource
import sys


def _limit(cpu_seconds: int, memory_bytes: int) -> None:
    # Soft CPU limit sends SIGXCPU (default action: die); the hard one a second later SIGKILL.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    # A parser has no business writing files or spawning processes.
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main() -> int:
    stdin = sys.stdin.buffer
    job = json.loads(stdin.readline())
    budget = job["budget"]
    _limit(int(budget["cpu_seconds"]), int(budget["memory_bytes"]))
    data = stdin.read()
    module_name, _, func_name = job["target"].partition(":")
    if not module_name.startswith("agentd."):
        raise SystemExit("refused target")
    try:
        fn = getattr(importlib.import_module(module_name), func_name)
        answer = {"result": fn(data, **job["kwargs"])}
    except MemoryError:
        answer = {"error": "the parser ran out of its memory budget", "limit": True}
    except Exception as exc:
        answer = {"error": str(exc)[:2000], "type": type(exc).__name__}
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
