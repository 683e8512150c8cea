"""Two agentd checkouts through daemon_throughput.py, run after run in alternating order; medians.

Why: on a shared or virtual 2-core box the same code gives bursts ±20 % apart a few minutes
apart (benchmarks/README.md), more than most changes are worth. Alternating A B, B A, … puts
both variants through the same moments, and the medians and the per-pair wins say whether a
change shows through that noise. Each checkout is run with `--source` (e.g. a `git archive`).

    .venv/bin/python benchmarks/throughput_ab.py /tmp/before /work/main --rounds 8
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIGURES = {
    "turns_s": r"throughput ([\d.]+) turns/s",
    "cpu_ms": r"= ([\d.]+) ms per turn, \d+% of one core",
    "seq_p50_ms": r"latency\s+n=\d+\s+p50\s+([\d.]+) ms",
    "load": r"load average ([\d.]+) at start",
    "probe_ms": r"host speed probe .*?: ([\d.]+) ms before",
}


@dataclass
class Run:
    turns_s: float
    cpu_ms: float
    seq_p50_ms: float
    load: float
    probe_ms: float  # the host's speed just before the burst (daemon_throughput.host_speed_ms)


def run_once(source: Path, messages: int, sequential: int, extra: list[str]) -> Run:
    """One daemon_throughput.py run of `source`; its printed figures."""
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "daemon_throughput.py"),
            "--source",
            str(source),
            "--messages",
            str(messages),
            "--sequential",
            str(sequential),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    ).stdout
    values = {}
    for name, pattern in FIGURES.items():
        found = re.search(pattern, out)
        if found is None:
            raise SystemExit(f"daemon_throughput.py printed no {name} for {source}:\n{out[-2000:]}")
        values[name] = float(found.group(1))
    return Run(**values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("a", type=Path, help="first checkout (the baseline)")
    ap.add_argument("b", type=Path, help="second checkout")
    ap.add_argument("--rounds", type=int, default=6, help="runs of each")
    ap.add_argument("--messages", type=int, default=200, help="messages in each burst")
    ap.add_argument("--sequential", type=int, default=20, help="one-at-a-time turns per run")
    # Anything else goes to daemon_throughput.py as it is (e.g. --chats 8, --embedder e5-small).
    args, extra = ap.parse_known_args()
    sources = [args.a.resolve(), args.b.resolve()]
    print(
        f"alternating {args.rounds} runs each of {args.messages}-message bursts, nproc "
        f"{os.cpu_count()}, load average {os.getloadavg()[0]:.2f} at start"
    )
    runs: dict[Path, list[Run]] = {s: [] for s in sources}
    for r in range(args.rounds):
        for source in sources if r % 2 == 0 else sources[::-1]:
            got = run_once(source, args.messages, args.sequential, extra)
            runs[source].append(got)
            print(
                f"  round {r}  {source}: {got.turns_s:6.1f} turns/s  {got.cpu_ms:5.1f} ms CPU/turn"
                f"  sequential p50 {got.seq_p50_ms:5.1f} ms  (probe {got.probe_ms:.1f} ms,"
                f" load {got.load:.2f})",
                flush=True,
            )
    a, b = (runs[s] for s in sources)
    for source, rs in runs.items():
        print(
            f"{source}: median {statistics.median(x.turns_s for x in rs):.1f} turns/s "
            f"({min(x.turns_s for x in rs):.1f}–{max(x.turns_s for x in rs):.1f}), "
            f"{statistics.median(x.cpu_ms for x in rs):.1f} ms CPU/turn, sequential p50 "
            f"{statistics.median(x.seq_p50_ms for x in rs):.1f} ms"
        )
    # Runs are paired by round: each pair ran back to back, so a win is not the box's mood.
    faster = sum(y.turns_s > x.turns_s for x, y in zip(a, b, strict=True))
    cheaper = sum(y.cpu_ms < x.cpu_ms for x, y in zip(a, b, strict=True))
    quicker = sum(y.seq_p50_ms < x.seq_p50_ms for x, y in zip(a, b, strict=True))
    print(
        f"{sources[1].name} against {sources[0].name}, pair by pair: more turns/s in {faster} "
        f"of {args.rounds}, less CPU per turn in {cheaper}, lower sequential p50 in {quicker}"
    )


if __name__ == "__main__":
    main()
