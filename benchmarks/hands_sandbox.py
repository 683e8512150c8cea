"""What the shell's sandbox costs: per command against running it directly, and the daemon's
turn latency while a command runs in another chat (both in one run).

1. The same command N times, alternating: `sh -c CMD` directly (baseline), through
   `run_sandboxed` with sandbox "none" (prlimit + capture), and with bubblewrap (as the shell
   tool runs it). Prints p50/mean per mode and the sandbox's extra ms per command.
2. `agentd run` with the fakes: p50 of N plain turns in one chat, then again while an approved
   `shell` command burns CPU (`yes > /dev/null`) in another chat; the ratio.

    .venv/bin/python benchmarks/hands_sandbox.py [-n 50] [--turns 15] [--command 'echo hi']
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.hands.sandbox import Limits, Sandbox, run_sandboxed
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.hands_support import alive, reachable_dir


async def direct(command: str, cwd: Path) -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        command,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    await proc.communicate()
    return time.perf_counter() - started


async def sandboxed(command: str, ws: Path, mode: str) -> float:
    started = time.perf_counter()
    result = await run_sandboxed(command, ws, sandbox=Sandbox(mode=mode), limits=Limits())  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    return time.perf_counter() - started


async def per_command(command: str, n: int, ws: Path) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"direct": [], "none": [], "bwrap": []}
    for _ in range(3):  # warm the page cache for all three
        await direct(command, ws), await sandboxed(command, ws, "none")
        await sandboxed(command, ws, "bwrap")
    for _ in range(n):
        samples["direct"].append(await direct(command, ws))
        samples["none"].append(await sandboxed(command, ws, "none"))
        samples["bwrap"].append(await sandboxed(command, ws, "bwrap"))
    return samples


def turn_latency(tg: FakeTelegram, llm: FakeAnthropic, chat: int, turns: int) -> list[float]:
    out = []
    for i in range(turns):
        llm.enqueue_text(f"answer {i}")
        before = len([m for m in tg.sent if m["chat_id"] == chat])
        started = time.monotonic()
        tg.add_message(chat, chat, f"question {i}")
        tg.wait_until(
            lambda b=before: len([m for m in tg.sent if m["chat_id"] == chat]) > b, 30, "the answer"
        )
        out.append(time.monotonic() - started)
    return out


def daemon_part(turns: int) -> tuple[list[float], list[float]]:
    ws = reachable_dir()
    marker = f"{int(time.time()) % 100000}"
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            FakeTelegram.running() as tg,
            FakeAnthropic.running() as llm,
        ):
            path = Path(tmp)
            (path / "agentd.toml").write_text(
                f'[tools.workspace]\npath = "{ws}"\n[tools.shell]\nwall_seconds = 600\n'
            )
            env = daemon_env(
                path,
                tg.base_url,
                llm.base_url,
                AGENTD_CONFIG=str(path / "agentd.toml"),
                AGENTD_CHAT__STREAMING="false",
                AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
            )
            daemon = Daemon(path, env).start()
            try:
                turn_latency(tg, llm, OWNER, 5)  # warm-up: first turns pay imports and caches
                idle = turn_latency(tg, llm, OWNER, turns)
                llm.enqueue_tool_use("shell", {"command": f"yes {marker} > /dev/null"}, "t_b")
                llm.enqueue_text("stopped")
                tg.add_message(43, 43, "burn")
                card = tg.wait_until(
                    lambda: next((m for m in tg.sent if m["reply_markup"]), None), 30, "card"
                )
                data = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
                owner = card["chat_id"]  # only the owner approves, in their private chat
                tg.add_callback_query(owner, owner, card["message_id"], data)
                tg.wait_until(lambda: alive(f"yes\x00{marker}"), 30, "the command running")
                busy = turn_latency(tg, llm, OWNER, turns)
                assert alive(f"yes\x00{marker}"), "the command ended before the turns did"
                tg.add_message(43, 43, "/stop")
                tg.wait_until(lambda: not alive(f"yes\x00{marker}"), 10, "the command stopped")
                idle += turn_latency(tg, llm, OWNER, turns)  # before and after: drift shows
            except Exception:
                Path("/tmp/hands-bench-daemon.log").write_text(daemon.log())
                raise
            finally:
                daemon.stop()
        return idle, busy
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def ms(values: list[float]) -> str:
    p50, mean = statistics.median(values) * 1000, statistics.mean(values) * 1000
    return f"p50 {p50:6.1f} ms, mean {mean:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=50, help="commands per mode")
    parser.add_argument("--turns", type=int, default=15, help="turns per daemon phase")
    parser.add_argument("--command", default="echo hi")
    parser.add_argument("--no-daemon", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}, nproc {os.cpu_count()}")
    ws = reachable_dir()
    try:
        samples = asyncio.run(per_command(args.command, args.n, ws))
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)
    for mode, label in (
        ("direct", "sh -c directly"),
        ("none", 'sandbox "none"'),
        ("bwrap", "bubblewrap"),
    ):
        print(f"{label:16s} {args.command!r}: {ms(samples[mode])}  (n={args.n})")
    extra = statistics.median(samples["bwrap"]) - statistics.median(samples["direct"])
    print(
        f"sandbox overhead per command (p50 bwrap − p50 direct): {extra * 1000:.1f} ms "
        "(goal ≤ 50 ms)"
    )
    if args.no_daemon:
        return
    idle, busy = daemon_part(args.turns)
    print(f"turn latency, nothing running (before+after): {ms(idle)}  (n={len(idle)})")
    print(f"turn latency, `yes > /dev/null` in a shell:   {ms(busy)}  (n={len(busy)})")
    print(f"ratio busy/idle p50: {statistics.median(busy) / statistics.median(idle):.2f}")


if __name__ == "__main__":
    main()
