"""Paired per-question difference between two `train_rerank.py --dump` files, with a bootstrap
95 % interval, per data set and store.

    python benchmarks/paired_recall.py base.jsonl variant.jsonl [--figure "reranked R@5"]

A question is matched by where it was scored (cross-validated or --test), its data set,
conversation, store and text (the n-th of equal texts with the n-th). The interval resamples
the questions with replacement (10,000 times, a fixed seed), so it says how much the mean
difference would move with another draw of questions like these; it says nothing of data of
another kind.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESAMPLES = 10_000


def read(path: Path, any_phase: bool = False) -> dict[tuple[Any, ...], dict[str, Any]]:
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    seen: dict[tuple[Any, ...], int] = defaultdict(int)
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        phase = "any" if any_phase else row["phase"]
        key = (phase, row["data"], row["conv"], row["stored"], row["question"])
        out[(*key, seen[key])] = row
        seen[key] += 1
    return out


def interval(diffs: Any, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), (RESAMPLES, len(diffs)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def compare(base: Path, variant: Path, figure: str, any_phase: bool = False) -> list[str]:
    a, b = read(base, any_phase), read(variant, any_phase)
    groups: dict[tuple[Any, ...], list[tuple[float, float]]] = defaultdict(list)
    for key in sorted(a.keys() & b.keys(), key=str):
        if figure in a[key] and figure in b[key]:
            groups[key[:2] + key[3:4]].append((a[key][figure], b[key][figure]))
    lines = [f"{figure}: {len(a)} / {len(b)} rows, {len(a.keys() & b.keys())} matched"]
    for (phase, data, stored), pairs in sorted(groups.items(), key=str):
        x = np.asarray(pairs)
        diff = x[:, 1] - x[:, 0]
        low, high = interval(diff)
        store = "stored" if stored else "turns"
        lines.append(
            f"  {phase:5} {data:22} {store:7} n={len(x):5}  {x[:, 0].mean():.3f} → "
            f"{x[:, 1].mean():.3f}  {diff.mean():+.3f} [{low:+.3f}, {high:+.3f}]"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("variant", type=Path)
    parser.add_argument("--figure", action="append", help='default "reranked R@5"')
    parser.add_argument(
        "--any-phase",
        action="store_true",
        help="match a question scored under --test in one file with it cross-validated in the"
        " other (a data set moved into the training data)",
    )
    args = parser.parse_args(argv)
    for figure in args.figure or ["reranked R@5"]:
        print("\n".join(compare(args.base, args.variant, figure, args.any_phase)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
