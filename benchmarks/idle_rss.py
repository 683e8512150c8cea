"""Resident memory (RSS) of an idle `agentd run`, with baselines for context.

Starts `agentd run` as a subprocess against the local Telegram and Anthropic fakes
(tests/daemon_process.py, tests/fakes/), waits for "agentd running", lets it idle --idle
seconds (long polls returning empty every second) and reads /proc/<pid>/status: VmRSS (the
figure), RssAnon / RssFile, VmHWM (peak) and the thread count. Then it runs --turns text turns
and idles again, to show what a little work adds. Baselines, measured the same way once their
imports are done: a bare interpreter, and `python -c "import aiogram, anthropic; input()"`.

Usage: .venv/bin/python benchmarks/idle_rss.py [--idle 5] [--turns 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon_process import Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads")


def status(pid: int) -> dict[str, int]:
    """The /proc/<pid>/status fields above, in kB (Threads: a count)."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in FIELDS:
            values[key] = int(rest.split()[0])
    return values


def mb(kb: int) -> str:
    return f"{kb / 1024:6.1f} MB"


def line(name: str, s: dict[str, int]) -> str:
    return (
        f"  {name:<40} VmRSS {mb(s['VmRSS'])}   (anon {mb(s['RssAnon'])}, file "
        f"{mb(s['RssFile'])}, peak {mb(s['VmHWM'])}, {s['Threads']} threads)"
    )


def baseline(code: str, settle: float) -> dict[str, int]:
    """RSS of `python -c code` once it printed "ready" (and `settle` seconds later)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{code}\nprint('ready', flush=True)\ninput()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"baseline {code!r} failed")
        time.sleep(settle)
        return status(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds to idle before reading")
    ap.add_argument("--turns", type=int, default=50, help="turns to run before the 2nd reading")
    args = ap.parse_args()

    print(
        f"agentd idle RSS — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} at start"
    )
    rows = [
        ("python -c 'input()'", baseline("pass", 0.5)),
        ("python -c 'import aiogram'", baseline("import aiogram", 0.5)),
        ("python -c 'import anthropic'", baseline("import anthropic", 0.5)),
        ("python -c 'import aiogram, anthropic'", baseline("import aiogram, anthropic", 0.5)),
    ]
    sdk = rows[-1][1]["VmRSS"]
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-rss-"))
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            env = daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_LIMITS__MESSAGES_PER_MINUTE="0")
            daemon = Daemon(tmp, env)
            try:
                daemon.start(timeout=60)
                pid = daemon.proc.pid
                time.sleep(args.idle)
                rows.append((f"agentd run, idle {args.idle:g} s after ready", status(pid)))
                if args.turns:
                    for i in range(args.turns):
                        tg.add_message(42 + i % 2, 42 + i % 2, f"message {i}")
                    tg.wait_for_sent(args.turns, timeout=120)
                    time.sleep(args.idle)
                    rows.append(
                        (f"agentd run, idle {args.idle:g} s after {args.turns} turns", status(pid))
                    )
                    replies = len(tg.sent)
                    llm_calls = len(llm.requests)
                rc = daemon.stop()
            finally:
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.proc.kill()
                    daemon.proc.wait(10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for name, s in rows:
        print(line(name, s))
    idle = next(s["VmRSS"] for name, s in rows if name.startswith("agentd run, idle"))
    print(
        f"\nidle agentd run: {mb(idle).strip()} = {idle / sdk:.2f}× the aiogram+anthropic "
        f"import baseline ({mb(idle - sdk).strip()} above it)"
    )
    if args.turns:
        print(f"checks: {replies} replies, {llm_calls} LLM calls, exit code {rc} on SIGTERM")


if __name__ == "__main__":
    main()
