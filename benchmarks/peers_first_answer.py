"""agentd beside nanobot on one Bot API emulator and one model mock, in one run: the first
answer after start (and where agentd's goes, phase by phase), turn latency, input tokens per
plain turn with the cache read share, and idle memory.

Each start has a message already waiting at the fake Bot API (tests/fakes/telegram.py) and an
instant model at the fake Messages API (tests/fakes/anthropic.py, its prompt cache by the
documented rules); the first answer is the time from spawning the process to the fake
receiving the reply (sendMessage), median of --runs starts, the two agents alternating so the
machine's load hits both alike; the CPU is the process tree's (user + system) at that moment.

Phases (--probe-runs starts of each, after the plain ones): benchmarks/startup_probe.py is the
process's sitecustomize and records, from inside, the CPU and wall time of every import by
package and thread, and of agentd's start-up functions (config, aiogram, database open and
migrations, getMe, the SDK import, the first model call); the emulators' own clocks give when
getMe, the first getUpdates, the model request and the reply reached them. The probe costs a
little: its first answer is printed beside the plain median.

Session: a started agent answers one message, then --turns more one at a time: each turn's
latency (message added → reply received), the model's input tokens per turn (raw: uncached +
cache read + cache write) and the share read from cache, then VmRSS of the process tree after
--idle seconds.

nanobot (PyPI `nanobot-ai`, with the python-telegram-bot plugin it installs for Telegram) runs
from its own virtual environment (made by this script, from the package index, if --nanobot-venv
does not exist yet). It has no setting for the Bot API's address, so its `sitecustomize.py`
points python-telegram-bot's `base_url` at the emulator; nothing else of it changes.
agentd runs as the README installs it (this checkout, its venv).

Usage: .venv/bin/python benchmarks/peers_first_answer.py [--runs 5] [--probe-runs 1]
       [--turns 10] [--idle 5] [--nanobot-venv /work/venv-nanobot] [--only agentd]
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.startup import tree_rss_kb
from tests.daemon_process import OWNER, TOKEN, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

PROBE = Path(__file__).with_name("startup_probe.py")
MODEL = "claude-haiku-4-5"  # agentd's default; nanobot is given the same
NANOBOT = "nanobot-ai==0.3.5"
PTB_PLUGIN = [
    "python-telegram-bot[socks,webhooks]>=22.6,<23.0",
    "socksio>=1.0.0,<2.0.0",
    "python-socks[asyncio]>=2.8.0,<3.0.0",
]
NANOBOT_SITE = """
import os
from telegram.ext import ApplicationBuilder

_build = ApplicationBuilder.build


def build(self):
    base = os.environ["BENCH_TELEGRAM_URL"]
    self.base_url(base + "/bot").base_file_url(base + "/file/bot")
    return _build(self)


ApplicationBuilder.build = build
"""
# agentd's start-up functions, timed by the probe the first time each runs ("module:attr").
AGENTD_PHASES = {
    "agentd.cli.common:config_or_exit": "config (read, validate)",
    "agentd.telegram.aiogram_loader:load": "aiogram import (thread)",
    "agentd.db.database:Database.open": "database open + migrations",
    "agentd.db.migrations:apply_migrations": "  of which migrations",
    "agentd.telegram.channel:OpenTelegram.identify": "Telegram getMe (call → answer)",
    "agentd.llm.preload:Preload._run": "anthropic SDK import (thread)",
    "agentd.daemon.services:build": "capabilities wired",
    "agentd.durable.engine:Engine.run": "engine resumes",
    "agentd.llm.anthropic_adapter:AnthropicLLM._get_client": "first model call: SDK wait + client",
    "agentd.llm.anthropic_adapter:AnthropicLLM.complete": "first model call (request → reply)",
}


def ensure_nanobot(venv: Path) -> Path:
    exe = venv / "bin" / "nanobot"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "--quiet"]
        subprocess.run([*pip, NANOBOT, *PTB_PLUGIN], check=True)
    return exe


def _site(tmp: Path, extra: str = "") -> Path:
    """A folder whose sitecustomize.py is the probe (idle unless STARTUP_PROBE is set)."""
    site = tmp / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(PROBE.read_text() + extra)
    return site


def _probe_env(tmp: Path, hooks: str) -> dict[str, str]:
    return {"STARTUP_PROBE": str(tmp / "probe.jsonl"), "STARTUP_PROBE_HOOKS": hooks}


@dataclass
class Agent:
    name: str
    launch: Callable[[Path, FakeTelegram, FakeAnthropic, dict[str, str]], subprocess.Popen]
    hooks: str = ""


def agentd_agent(tree: Path | None = None) -> Agent:
    """agentd from this checkout, or from another one (`tree`: a baseline to compare with)."""

    def launch(
        tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, extra: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        env = daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_LIMITS__MESSAGES_PER_MINUTE="0")
        code = str(tree) if tree is not None else env["PYTHONPATH"]
        env["PYTHONPATH"] = f"{_site(tmp)}{os.pathsep}{code}"
        daemon = Daemon(tmp, env | extra)
        daemon.start(wait_ready=False)
        assert daemon.proc is not None
        return daemon.proc

    return Agent("agentd" if tree is None else f"agentd@{tree}", launch, ",".join(AGENTD_PHASES))


def nanobot_agent(exe: Path) -> Agent:
    def launch(
        tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, extra: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        home = tmp / "home"
        (home / ".nanobot").mkdir(parents=True)
        config = {
            "agents": {"defaults": {"model": f"anthropic/{MODEL}", "workspace": str(tmp / "ws")}},
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
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "PYTHONPATH": str(_site(tmp, NANOBOT_SITE)),
            "BENCH_TELEGRAM_URL": tg.base_url,
        }
        log = (tmp / "nanobot.log").open("wb")
        return subprocess.Popen(
            [str(exe), "gateway"], env=env | extra, cwd=tmp, stdout=log, stderr=subprocess.STDOUT
        )

    return Agent("nanobot", launch)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of pid and its descendants so far."""
    total, stack = 0.0, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while stack:
        current = stack.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{current}/task").iterdir():
                stack.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return total


@dataclass
class Start:
    answer: float
    cpu: float
    spawn: float = 0.0  # time.time() at spawn
    reached: dict[str, float] = field(default_factory=dict)  # emulator clocks, since spawn
    probe: list[dict[str, Any]] = field(default_factory=list)


def first_answer(agent: Agent, probe: bool) -> Start:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-peers-"))
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            tg.add_message(OWNER, OWNER, "hello, are you there?")
            extra = _probe_env(tmp, agent.hooks) if probe else {}
            spawn, t0 = time.time(), time.monotonic()
            proc = agent.launch(tmp, tg, llm, extra)
            try:
                tg.wait_for_sent(1, timeout=120)
                start = Start(time.monotonic() - t0, tree_cpu(proc.pid), spawn)
                firsts = {
                    "getMe reached the emulator": tg.calls("getMe")[:1],
                    "first getUpdates": tg.calls("getUpdates")[:1],
                    "model request reached the mock": llm.requests[:1],
                    "reply reached the emulator": tg.sent[:1],
                }
                start.reached = {k: v[0]["time"] - spawn for k, v in firsts.items() if v}
            finally:
                _stop(proc)
            if probe:
                lines = (tmp / "probe.jsonl").read_text().splitlines()
                start.probe = [json.loads(line) for line in lines if line.strip()]
            return start
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Session:
    latencies: list[float]
    calls: int
    raw_input: int
    cache_read: int
    rss_mb: float
    smaps: dict[str, float] = field(default_factory=dict)
    billed: float = 0.0  # input priced as plain input tokens (see `billed`)


def billed(usage: dict[str, Any]) -> float:
    """A call's input as the price list counts it, in plain-input tokens: a cache read costs
    0.1 of one, a write 1.25 (5 minutes) or 2 (1 hour)."""
    split = usage.get("cache_creation") or {}
    written_1h = split.get("ephemeral_1h_input_tokens", 0)
    written_5m = usage.get("cache_creation_input_tokens", 0) - written_1h
    return (
        usage.get("input_tokens", 0)
        + 0.1 * usage.get("cache_read_input_tokens", 0)
        + 1.25 * written_5m
        + 2.0 * written_1h
    )


def session(agent: Agent, turns: int, idle: float, cache_min: int | None) -> Session:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-peers-session-"))
    try:
        with (
            FakeTelegram.running() as tg,
            FakeAnthropic.running(cache_min_tokens=cache_min) as llm,
        ):
            proc = agent.launch(tmp, tg, llm, {})
            try:
                tg.add_message(OWNER, OWNER, "hello")
                tg.wait_for_sent(1, timeout=120)
                time.sleep(1.0)  # let the first turn's background work settle
                before = len(llm.responses)
                latencies = []
                for i in range(turns):
                    sent = time.time()
                    tg.add_message(OWNER, OWNER, f"What is a good name for a cat? ({i})")
                    tg.wait_for_sent(i + 2, timeout=120)
                    latencies.append(tg.sent[i + 1]["time"] - sent)
                time.sleep(idle)  # the figure is memory after idling, by definition
                rss = tree_rss_kb(proc.pid) / 1024
                smaps = smaps_mb(proc.pid)
                usages = [
                    r["body"]["usage"]
                    for r in llm.responses[before:]
                    if r.get("kind") == "message" and isinstance(r.get("body"), dict)
                ]
            finally:
                _stop(proc)
        raw = sum(
            u.get("input_tokens", 0)
            + u.get("cache_read_input_tokens", 0)
            + u.get("cache_creation_input_tokens", 0)
            for u in usages
        )
        read = sum(u.get("cache_read_input_tokens", 0) for u in usages)
        return Session(latencies, len(usages), raw, read, rss, smaps, sum(map(billed, usages)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# What each import the start makes leaves resident, in a fresh interpreter: the steps in the
# order `agentd run` takes them, each line VmRSS and CPU after it; then the SDK alone, the floor.
RESIDENT = """
import json, resource, sys
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
def aiogram():
    from agentd.telegram import aiogram_loader
    aiogram_loader.load(lazy=True)
steps = {
    "agentd": [("interpreter", lambda: None),
               ("agentd.cli.run (typer, config)", lambda: __import__("agentd.cli.run")),
               ("agentd.daemon (agentd, aiohttp)", lambda: __import__("agentd.daemon")),
               ("aiogram (lazy)", aiogram),
               ("anthropic SDK", lambda: __import__("anthropic"))],
    "sdk": [("interpreter", lambda: None), ("anthropic alone", lambda: __import__("anthropic"))],
}[sys.argv[1]]
for name, step in steps:
    step()
    if name.startswith("anthropic"):
        name += " " + sys.modules["anthropic"].__version__
    print(json.dumps([name, rss(), cpu(), len(sys.modules)]))
"""


def resident(kind: str, python: str = sys.executable) -> list[tuple[str, float, float, int]]:
    out = subprocess.run(
        [python, "-c", RESIDENT, kind], capture_output=True, text=True, check=True
    ).stdout
    return [tuple(json.loads(line)) for line in out.splitlines()]  # type: ignore[misc]


def smaps_mb(pid: int) -> dict[str, float]:
    """The process's smaps_rollup: RSS split into anonymous (heap: objects) and file pages."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        fields[name.rstrip(":")] = int(value) / 1024
    return fields


# -- reporting --------------------------------------------------------------------------------


def _imports(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The last import snapshot: "thread|package" → [self CPU, self wall, modules]."""
    snapshots = [r["imports"] for r in records if "imports" in r]
    return snapshots[-1] if snapshots else {}


def print_phases(name: str, starts: list[Start], plain: float) -> None:
    start = min(starts, key=lambda s: s.answer)
    records = start.probe
    probe_mark = next((r for r in records if r.get("mark") == "probe"), None)
    print(
        f"\n{name}: where the first answer goes (probed start: {start.answer:.2f} s, "
        f"plain median {plain:.2f} s; CPU of the process tree by then {start.cpu:.2f} s)"
    )
    print(f"  {'phase':<44} {'from':>7} {'to':>7} {'wall':>7} {'CPU':>7}")
    if probe_mark is not None:
        at = probe_mark["time"] - start.spawn
        label, cpu = "interpreter start (to site)", probe_mark["cpu"]
        print(f"  {label:<44} {0:7.3f} {at:7.3f} {at:7.3f} {cpu:7.3f}")
    labels = AGENTD_PHASES if name.startswith("agentd") else {}
    phases = {r["phase"]: r for r in records if "phase" in r}
    rows = []
    for hook, label in labels.items():
        attr = hook.split(":")[1]
        if attr in phases:
            r = phases[attr]
            rows.append((r["start"] - start.spawn, label, r))
    for begin, label, r in sorted(rows, key=lambda row: row[0]):
        end = r["end"] - start.spawn
        print(f"  {label:<44} {begin:7.3f} {end:7.3f} {end - begin:7.3f} {r['cpu']:7.3f}")
    for what, at in start.reached.items():
        print(f"  {what:<44} {'':>7} {at:7.3f}")
    missing = [r["missing"] for r in records if "missing" in r]
    if missing:
        print(f"  (not found, not timed: {', '.join(missing)})")
    imports = _imports(records)
    by_thread: dict[str, float] = {}
    by_package: dict[str, list[float]] = {}
    for key, (cpu, wall, _count) in imports.items():
        thread, package = key.split("|", 1)
        by_thread[thread] = by_thread.get(thread, 0.0) + cpu
        total = by_package.setdefault(package, [0.0, 0.0, ""])
        total[0] += cpu
        total[1] += wall
        total[2] = thread if not total[2] or total[2] == thread else "several"
    threads = ", ".join(f"{t} {c:.3f} s" for t, c in sorted(by_thread.items()))
    print(f"  imports, self CPU by thread: {threads}; by package (top 16):")
    top = sorted(by_package.items(), key=lambda kv: -kv[1][0])
    for package, (cpu, wall, thread) in top[:16]:
        print(f"    {package:<30} CPU {cpu:6.3f} s  wall {wall:6.3f} s  ({thread})")
    rest = top[16:]
    if rest:
        cpu = sum(v[0] for _, v in rest)
        print(f"    {len(rest)} more packages{'':<13} CPU {cpu:6.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="plain starts of each (alternating)")
    ap.add_argument("--probe-runs", type=int, default=1, help="probed starts of each")
    ap.add_argument("--turns", type=int, default=10, help="turns of the session (0: none)")
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument(
        "--cache-min",
        type=int,
        default=None,
        help="the mock's shortest cacheable prefix in the session (default: the model's own, "
        "4,096 for Haiku 4.5; 1024 is Sonnet 4.5's)",
    )
    ap.add_argument("--nanobot-venv", type=Path, default=Path("/work/venv-nanobot"))
    ap.add_argument("--only", choices=("agentd", "nanobot"), default=None)
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help="also start agentd from another checkout (e.g. `git archive main`), alternating",
    )
    ap.add_argument(
        "--no-resident", dest="resident", action="store_false", help="skip the imports' RSS table"
    )
    args = ap.parse_args()
    agents = [agentd_agent()]
    if args.only != "agentd":
        agents.append(nanobot_agent(ensure_nanobot(args.nanobot_venv)))
    if args.baseline is not None:
        agents.append(agentd_agent(args.baseline))
    agents = [a for a in agents if args.only != "nanobot" or a.name == "nanobot"]
    print(
        f"agentd beside nanobot — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} at start, {NANOBOT}, model mock {MODEL}"
    )
    plain: dict[str, list[Start]] = {a.name: [] for a in agents}
    probed: dict[str, list[Start]] = {a.name: [] for a in agents}
    for _ in range(args.runs):
        for agent in agents:
            plain[agent.name].append(first_answer(agent, probe=False))
    for _ in range(args.probe_runs):
        for agent in agents:
            probed[agent.name].append(first_answer(agent, probe=True))
    sessions = {}
    if args.turns:
        sessions = {a.name: session(a, args.turns, args.idle, args.cache_min) for a in agents}
    median: dict[str, float] = {}
    print("\nfirst answer after start (plain starts, alternating):")
    for agent in agents:
        t = [s.answer for s in plain[agent.name]]
        median[agent.name] = statistics.median(t)
        cpu = statistics.median(s.cpu for s in plain[agent.name])
        print(
            f"  {agent.name:<8} median {median[agent.name]:5.2f} s (min {min(t):.2f}, "
            f"max {max(t):.2f}), CPU by then {cpu:.2f} s"
        )
    if args.probe_runs:
        for agent in agents:
            print_phases(agent.name, probed[agent.name], median[agent.name])
    if sessions:
        print(f"\nsession: {args.turns} plain turns after a first one, then {args.idle:g} s idle")
        for name, s in sessions.items():
            p50 = statistics.median(s.latencies) * 1000
            per_turn = s.raw_input / max(1, args.turns)
            share = s.cache_read / s.raw_input if s.raw_input else 0.0
            print(
                f"  {name:<8} turn p50 {p50:7.1f} ms (max {max(s.latencies) * 1000:.0f}); "
                f"input tokens per turn {per_turn:7.0f} raw, {share:5.1%} read from cache, "
                f"{s.billed / max(1, args.turns):7.0f} as billed ({s.calls} model calls); "
                f"idle RSS {s.rss_mb:6.1f} MB "
                f"(anonymous {s.smaps.get('Anonymous', 0):.1f}, file-backed "
                f"{s.smaps.get('Rss', 0) - s.smaps.get('Anonymous', 0):.1f})"
            )
    if args.resident:
        print("\nresident after each start-up import, a fresh interpreter each (VmRSS, CPU):")
        rows = resident("agentd") + resident("sdk")[1:]
        if any(a.name == "nanobot" for a in agents):
            python = str(args.nanobot_venv / "bin" / "python")
            rows += [(f"{n} (nanobot's)", r, c, m) for n, r, c, m in resident("sdk", python)[1:]]
        for name, rss, cpu, modules in rows:
            print(f"  {name:<44} {rss:6.1f} MB {cpu:6.3f} s CPU {modules:5d} modules")
    for agent in agents:
        if agent.name.startswith("agentd@"):
            ratio = median["agentd"] / median[agent.name]
            print(f"\nthis tree / {agent.name}: first answer {ratio:.2f}×")
    if "agentd" in median and "nanobot" in median:
        a, n = (median["agentd"], median["nanobot"])
        line = f"\nagentd / nanobot: first answer {a / n:.2f}× (goal ≤ 0.80×)"
        if sessions:
            sa, sn = sessions["agentd"], sessions["nanobot"]
            line += (
                f", idle RSS {sa.rss_mb / sn.rss_mb:.2f}× (≤ 0.60×), turn p50 "
                f"{statistics.median(sa.latencies) / statistics.median(sn.latencies):.2f}× "
                f"(≤ 0.10×), raw input tokens per turn {sa.raw_input / max(1, sn.raw_input):.2f}× "
                "(≤ 0.40×)"
            )
        print(line)
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
