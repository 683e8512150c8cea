"""Cold start and footprint of `agentd run`, lazy aiogram beside eager aiogram, in one run.

Against the fakes (tests/fakes/), alternating the two paths (`startup.lazy_aiogram` true, the
default, or false) so machine load hits both alike:
- first answer: a message is already waiting in the fake Telegram when `agentd run` starts;
  the time from spawning the process to the fake receiving the reply (sendMessage), and to
  the "agentd running" log line; median of --runs starts per path.
- idle RSS: after --turns text turns and --idle seconds of idling, VmRSS summed over the
  daemon's process tree (/proc), per path; with --embedder the memory embedder is set too.
- where the CPU goes: each import `agentd run` makes before it can answer, done one after the
  other in a fresh interpreter per path, with the CPU time (user + system) each took.

`--compare DIR` times another checkout's first answer too (e.g. /work/main: before a change).

Usage: .venv/bin/python benchmarks/startup.py [--runs 5] [--turns 20] [--idle 5] [--embedder X]
       [--compare DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.idle_rss import status
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

PATHS = {"lazy": "true", "eager": "false"}


def tree_rss_kb(pid: int) -> int:
    """VmRSS of pid and all its descendants, in kB."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += status(current).get("VmRSS", 0)
        for task in Path(f"/proc/{current}/task").iterdir():
            children = (task / "children").read_text().split()
            stack.extend(int(c) for c in children)
    return total


def _env(tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, path: str, embedder: str) -> dict:
    overrides = {"AGENTD_LIMITS__MESSAGES_PER_MINUTE": "0"}
    if path in PATHS:
        overrides |= {"AGENTD_STARTUP__LAZY_AIOGRAM": PATHS[path]}
    else:  # another checkout, with its own defaults
        overrides["PYTHONPATH"] = path
    if embedder:
        overrides["AGENTD_MEMORY__EMBEDDER"] = embedder
    return daemon_env(tmp, tg.base_url, llm.base_url, **overrides)


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far (load-independent, unlike wall time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


STAGES = ("getMe", "first getUpdates", "first model request", "first sendMessage")


def first_answer(path: str, embedder: str) -> tuple[float, float, float, dict[str, float]]:
    """Seconds to the first reply, daemon CPU seconds by then, seconds to "agentd running",
    and when each start-up stage reached the emulators (seconds since spawn)."""
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-start-"))
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            tg.add_message(OWNER, OWNER, "hello, are you there?")
            daemon = Daemon(tmp, _env(tmp, tg, llm, path, embedder))
            t0, wall0 = time.monotonic(), time.time()
            daemon.start(wait_ready=False)
            try:
                tg.wait_for_sent(1, timeout=120)
                answered = time.monotonic() - t0
                assert daemon.proc is not None
                cpu = cpu_seconds(daemon.proc.pid)
                daemon.wait_for_log("agentd running", timeout=120)
                ready = time.monotonic() - t0
                stages = dict(
                    zip(
                        STAGES,
                        (
                            tg.calls("getMe")[0]["time"],
                            tg.calls("getUpdates")[0]["time"],
                            llm.requests[0]["time"],
                            tg.sent[0]["time"],
                        ),
                        strict=True,
                    )
                )
                daemon.stop()
            finally:
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.proc.kill()
                    daemon.proc.wait(10)
        return answered, cpu, ready, {k: v - wall0 for k, v in stages.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def idle_rss(path: str, turns: int, idle: float, embedder: str) -> int:
    """kB of the process tree after `turns` turns and `idle` seconds."""
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-rss-"))
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            daemon = Daemon(tmp, _env(tmp, tg, llm, path, embedder))
            try:
                daemon.start(timeout=120)
                for i in range(turns):
                    tg.add_message(OWNER + i % 2, OWNER + i % 2, f"message {i}")
                tg.wait_for_sent(turns, timeout=300)
                time.sleep(idle)
                assert daemon.proc is not None
                return tree_rss_kb(daemon.proc.pid)
            finally:
                daemon.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# The imports `agentd run` makes before its first answer, in order; argv[1] is "true" (lazy).
BREAKDOWN = """
import resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
lazy = sys.argv[1] == "true"
steps = [("interpreter start", lambda: None),
         ("agentd.cli.app (typer)", lambda: __import__("agentd.cli.app")),
         ("agentd.cli.run (config)", lambda: __import__("agentd.cli.run")),
         ("agentd.daemon (aiohttp, agentd)", lambda: __import__("agentd.daemon")),
         ("aiogram", lambda: __import__("agentd.telegram.aiogram_loader").telegram
                                .aiogram_loader.load(lazy=lazy)),
         ("model client (anthropic SDK, in a thread in the daemon)",
          lambda: __import__("anthropic"))]
last = 0.0
for name, step in steps:
    step()
    now = cpu()
    print(f"{name}\t{now - last:.3f}")
    last = now
"""


def breakdown(path: str) -> list[tuple[str, float]]:
    """CPU seconds of each start-up import, in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", BREAKDOWN, PATHS[path]], capture_output=True, text=True, check=True
    ).stdout
    return [(name, float(cpu)) for name, cpu in (line.split("\t") for line in out.splitlines())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="starts per path for first answer")
    ap.add_argument("--turns", type=int, default=20, help="turns before the RSS reading")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before the reading")
    ap.add_argument(
        "--embedder",
        default="",
        help="memory.embedder for the daemon (default: the daemon's test default, hashing)",
    )
    ap.add_argument(
        "--compare",
        default="",
        metavar="DIR",
        help="also time the first answer "
        "of another checkout (its defaults), alternating with these",
    )
    args = ap.parse_args()
    print(
        f"agentd start-up — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} at start, embedder {args.embedder or 'default'}"
    )
    paths = [*PATHS, *([args.compare] if args.compare else [])]
    answers: dict[str, list[float]] = {p: [] for p in paths}
    readies: dict[str, list[float]] = {p: [] for p in paths}
    cpus: dict[str, list[float]] = {p: [] for p in paths}
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for _ in range(args.runs):
        for path in paths:
            answered, cpu, ready, reached = first_answer(path, args.embedder)
            if path == "lazy":
                for stage, at in reached.items():
                    stages[stage].append(at)
            answers[path].append(answered)
            cpus[path].append(cpu)
            readies[path].append(ready)
    rss = {path: idle_rss(path, args.turns, args.idle, args.embedder) for path in PATHS}
    for path in PATHS:
        print(
            f"  {path:<5} first answer median {statistics.median(answers[path]):5.2f} s "
            f"(min {min(answers[path]):.2f}, max {max(answers[path]):.2f}), "
            f"CPU by then {statistics.median(cpus[path]):5.2f} s; "
            f"ready median {statistics.median(readies[path]):5.2f} s; "
            f"idle RSS after {args.turns} turns {rss[path] / 1024:6.1f} MB"
        )
    if args.compare:
        base, ours = statistics.median(answers[args.compare]), statistics.median(answers["lazy"])
        print(
            f"  {args.compare}: first answer median {base:5.2f} s "
            f"(min {min(answers[args.compare]):.2f}), CPU by then "
            f"{statistics.median(cpus[args.compare]):5.2f} s; this tree / it: {ours / base:.2f}×"
        )
    print("Start-up budget (default path): when each stage reached the emulators, median (s)")
    print(f"  {'stage':<22} {'since spawn':>11} {'step':>6}")
    last = 0.0
    for stage, ats in stages.items():
        at = statistics.median(ats)
        print(f"  {stage:<22} {at:11.3f} {at - last:6.3f}")
        last = at
    print("  (before getMe: interpreter, imports and opening the database, overlapped; the CPU")
    print("  of each import is below. getUpdates → model request: the turn's steps and recall.)")
    parts = {path: breakdown(path) for path in PATHS}
    print("CPU of the start-up imports, one after the other (s): step, lazy, eager")
    for (name, lazy_cpu), (_, eager_cpu) in zip(parts["lazy"], parts["eager"], strict=True):
        print(f"  {name:<34} {lazy_cpu:6.3f} {eager_cpu:6.3f}")
    print(
        f"  {'total':<34} {sum(c for _, c in parts['lazy']):6.3f} "
        f"{sum(c for _, c in parts['eager']):6.3f}"
    )
    lazy, eager = (statistics.median(answers[p]) for p in PATHS)
    cpu_lazy, cpu_eager = (statistics.median(cpus[p]) for p in PATHS)
    print(
        f"lazy / eager: first answer {lazy / eager:.2f}×, CPU to it {cpu_lazy / cpu_eager:.2f}×, "
        f"idle RSS {rss['lazy'] / rss['eager']:.2f}×; load average {os.getloadavg()[0]:.2f} at end"
    )


if __name__ == "__main__":
    main()
