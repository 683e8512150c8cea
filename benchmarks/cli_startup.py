"""Start-up time of `agentd history --json` against `python -c "import aiogram"`.

Creates a small database (migrations applied, --messages messages in two chats) in a temp
dir, then times each command --runs times as a fresh process (after one untimed warm-up run
each, so all start from a warm page cache) and prints median and min wall time and the ratio.
`python -c pass` is timed too: the interpreter's own floor. It also checks, with
`python -X importtime`, that the history command imports neither aiogram nor anthropic, and
lists its most expensive imports.

Usage: .venv/bin/python benchmarks/cli_startup.py [--runs 10] [--messages 40]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.memory.history import save_message


def make_db(path: Path, messages: int) -> None:
    conn = open_sync(path)
    try:
        apply_migrations(conn)
        conn.execute("BEGIN IMMEDIATE")
        for i in range(messages):
            chat = 42 if i % 2 == 0 else 43
            role = "user" if (i // 2) % 2 == 0 else "assistant"
            save_message(
                conn,
                chat_id=chat,
                user_id=chat if role == "user" else None,
                role=role,
                content=f"message {i}: " + "lorem ipsum dolor sit amet " * 4,
                source_key=f"bench-{i}",
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def clean_env(db: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_"))
    }
    env["AGENTD_STORAGE__PATH"] = str(db)
    return env


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stderr}")
    return elapsed


def import_report(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[list[str], list[str]]:
    """(heavy packages imported, top imports by cumulative µs) via -X importtime."""
    result = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]], env=env, cwd=cwd, capture_output=True, text=True
    )
    rows = []
    for line in result.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)", line)
        if m:
            rows.append((int(m.group(2)), len(m.group(3)) // 2, m.group(4)))
    heavy = sorted({name for _, _, name in rows if name.split(".")[0] in ("aiogram", "anthropic")})
    # Imports nested at most three deep that cost 10 ms or more (cumulative), as a tree:
    # -X importtime prints a module after its children, so reversed it lists parents first.
    top = [r for r in reversed(rows) if r[1] <= 3 and r[0] >= 10_000]
    return heavy, [f"{'  ' * depth}{name} {cum / 1000:.0f} ms" for cum, depth, name in top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="timed runs per command")
    ap.add_argument("--messages", type=int, default=40, help="messages in the test database")
    args = ap.parse_args()

    py = sys.executable
    agentd_cmd = [py, "-m", "agentd", "history", "--json"]
    commands = {
        "python -c pass": [py, "-c", "pass"],
        "agentd history --json": agentd_cmd,
        'python -c "import aiogram"': [py, "-c", "import aiogram"],
    }
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-cli-"))
    try:
        db = tmp / "agentd.db"
        make_db(db, args.messages)
        env = clean_env(db)
        check = subprocess.run(agentd_cmd, env=env, cwd=tmp, capture_output=True, text=True)
        if check.returncode != 0 or check.stdout.count('"role"') != args.messages:
            raise SystemExit(f"agentd history --json did not list the messages:\n{check.stderr}")
        print(
            f"agentd CLI start-up — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
            f"load average {os.getloadavg()[0]:.2f} at start, {args.runs} runs each "
            f"(+1 warm-up), DB with {args.messages} messages"
        )
        medians = {}
        # Interleave commands run by run, so a load spike hits them all alike.
        samples: dict[str, list[float]] = {name: [] for name in commands}
        for cmd in commands.values():
            timed(cmd, env, tmp)  # warm-up: page cache, .pyc files
        for _ in range(args.runs):
            for name, cmd in commands.items():
                samples[name].append(timed(cmd, env, tmp))
        for name, values in samples.items():
            medians[name] = statistics.median(values)
            print(
                f"  {name:<28} median {medians[name] * 1000:7.1f} ms   "
                f"min {min(values) * 1000:7.1f} ms   max {max(values) * 1000:7.1f} ms"
            )
        cli, aiogram, floor = (
            medians["agentd history --json"],
            medians['python -c "import aiogram"'],
            medians["python -c pass"],
        )
        print(
            f"\nratio agentd history / import aiogram: {cli / aiogram:.2f} "
            f"(median {cli * 1000:.0f} ms vs {aiogram * 1000:.0f} ms)"
        )
        print(
            f"minus the interpreter floor ({floor * 1000:.0f} ms): "
            f"{(cli - floor) * 1000:.0f} ms vs {(aiogram - floor) * 1000:.0f} ms "
            f"= {(cli - floor) / (aiogram - floor):.2f}"
        )
        heavy, top = import_report(agentd_cmd, env, tmp)
        print(
            "\nheavy SDKs imported by `agentd history`: "
            + (", ".join(heavy) if heavy else "none (no aiogram, no anthropic)")
        )
        print("largest imports of `agentd history` (-X importtime, cumulative, ≥ 10 ms):")
        for line in top:
            print(f"  {line}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
