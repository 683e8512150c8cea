"""First answer after start and idle memory: agentd beside nanobot, same emulators, one run.

Each start has a message already waiting at the fake Bot API (tests/fakes/telegram.py) and an
instant model at the fake Messages API (tests/fakes/anthropic.py); the figure is the time from
spawning the process to the fake receiving the reply (sendMessage), median of --runs starts,
the two agents alternating so the machine's load hits both alike. Then each idles after
--turns answered messages and its process tree's VmRSS is read.

nanobot (PyPI `nanobot-ai`, with the python-telegram-bot plugin it installs for Telegram) runs
from its own virtual environment (made by this script, from the package index, if --nanobot-venv
does not exist yet). It has no setting for the Bot API's address, so a `sitecustomize.py` on its
PYTHONPATH points python-telegram-bot's `base_url` at the emulator; nothing else of it changes.
agentd runs as the README installs it (this checkout, its venv).

Usage: .venv/bin/python benchmarks/peers_first_answer.py [--runs 5] [--turns 10] [--idle 5]
       [--nanobot-venv /work/venv-nanobot]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.startup import tree_rss_kb
from tests.daemon_process import OWNER, TOKEN, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

NANOBOT = "nanobot-ai==0.3.5"
PTB_PLUGIN = [
    "python-telegram-bot[socks,webhooks]>=22.6,<23.0",
    "socksio>=1.0.0,<2.0.0",
    "python-socks[asyncio]>=2.8.0,<3.0.0",
]
SITECUSTOMIZE = """
import os
from telegram.ext import ApplicationBuilder

_build = ApplicationBuilder.build


def build(self):
    base = os.environ["BENCH_TELEGRAM_URL"]
    self.base_url(base + "/bot").base_file_url(base + "/file/bot")
    return _build(self)


ApplicationBuilder.build = build
"""


def ensure_nanobot(venv: Path) -> Path:
    exe = venv / "bin" / "nanobot"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "--quiet"]
        subprocess.run([*pip, NANOBOT, *PTB_PLUGIN], check=True)
    return exe


def nanobot_home(tmp: Path, tg: FakeTelegram, llm: FakeAnthropic) -> dict[str, str]:
    """A HOME with nanobot's config for the emulators, and the env that runs it."""
    home = tmp / "home"
    (home / ".nanobot").mkdir(parents=True)
    config = {
        "agents": {
            "defaults": {"model": "anthropic/claude-haiku-4-5", "workspace": str(tmp / "workspace")}
        },
        "providers": {"anthropic": {"apiKey": "sk-ant-bench", "apiBase": llm.base_url}},
        "channels": {
            "sendProgress": False,
            "sendToolHints": False,
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "allowFrom": [str(OWNER)],
                "streaming": False,
                "reactEmoji": "",
            },
        },
    }
    (home / ".nanobot" / "config.json").write_text(json.dumps(config))
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PYTHONPATH": str(site),
        "BENCH_TELEGRAM_URL": tg.base_url,
    }


def _run_agentd(tmp: Path, tg: FakeTelegram, llm: FakeAnthropic) -> subprocess.Popen[bytes]:
    env = daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_LIMITS__MESSAGES_PER_MINUTE="0")
    daemon = Daemon(tmp, env)
    daemon.start(wait_ready=False)
    assert daemon.proc is not None
    return daemon.proc


def _run_nanobot(exe: Path) -> Callable[[Path, FakeTelegram, FakeAnthropic], subprocess.Popen]:
    def run(tmp: Path, tg: FakeTelegram, llm: FakeAnthropic) -> subprocess.Popen[bytes]:
        env = nanobot_home(tmp, tg, llm)
        log = (tmp / "nanobot.log").open("wb")
        return subprocess.Popen(
            [str(exe), "gateway"], env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT
        )

    return run


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def first_answer(run: Callable[..., subprocess.Popen[bytes]]) -> float:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-peers-"))
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            tg.add_message(OWNER, OWNER, "hello, are you there?")
            t0 = time.monotonic()
            proc = run(tmp, tg, llm)
            try:
                tg.wait_for_sent(1, timeout=120)
                return time.monotonic() - t0
            finally:
                _stop(proc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def idle_rss(run: Callable[..., subprocess.Popen[bytes]], turns: int, idle: float) -> float:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-peers-rss-"))
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            proc = run(tmp, tg, llm)
            try:
                for i in range(turns):
                    tg.add_message(OWNER, OWNER, f"message {i}")
                    tg.wait_for_sent(i + 1, timeout=120)
                time.sleep(idle)  # the figure is memory after idling, by definition
                return tree_rss_kb(proc.pid) / 1024
            finally:
                _stop(proc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--nanobot-venv", type=Path, default=Path("/work/venv-nanobot"))
    args = ap.parse_args()
    agents = {"agentd": _run_agentd, "nanobot": _run_nanobot(ensure_nanobot(args.nanobot_venv))}
    print(
        f"first answer after start — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} at start, {NANOBOT}"
    )
    times: dict[str, list[float]] = {name: [] for name in agents}
    for _ in range(args.runs):
        for name, run in agents.items():
            times[name].append(first_answer(run))
    rss = {name: idle_rss(run, args.turns, args.idle) for name, run in agents.items()}
    for name in agents:
        t = times[name]
        print(
            f"  {name:<8} first answer median {statistics.median(t):5.2f} s "
            f"(min {min(t):.2f}, max {max(t):.2f}); idle RSS after {args.turns} turns "
            f"{rss[name]:6.1f} MB"
        )
    ratio = statistics.median(times["agentd"]) / statistics.median(times["nanobot"])
    print(
        f"agentd / nanobot: first answer {ratio:.2f}× (goal ≤ 0.80×), idle RSS "
        f"{rss['agentd'] / rss['nanobot']:.2f}× (goal ≤ 1.00×); load average "
        f"{os.getloadavg()[0]:.2f} at end"
    )


if __name__ == "__main__":
    main()
