"""The messaging-app rendering of LoCoMo (benchmarks/noisy_chat.py): deterministic, its labels
carried over to the messages a turn was split into, and noisier than what it renders."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "tests" / "data" / "locomo_synthetic.json"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _render(tmp_path: Path, seed: int = 1) -> list[dict]:
    out = tmp_path / f"noisy-{seed}.json"
    assert (
        _module("noisy_chat").main(["--data", str(DATASET), "--out", str(out), "--seed", str(seed)])
        == 0
    )
    return json.loads(out.read_text(encoding="utf-8"))


def test_the_rendering_is_seeded_and_keeps_every_question_answerable(tmp_path: Path) -> None:
    first, again, other = _render(tmp_path), _render(tmp_path), _render(tmp_path, seed=2)
    assert first == again and first != other
    bench = _module("memory_retrieval")
    clean, _ = bench.load_dataset(DATASET)
    noisy_path = tmp_path / "noisy-1.json"
    noisy, stats = bench.load_dataset(noisy_path)
    assert stats.dropped_evidence_ids == 0  # every label names a message of its conversation
    by_id = {c.sample_id: c for c in noisy}
    for conv in clean:
        rendered = by_id[conv.sample_id]
        assert len(rendered.turns) >= len(conv.turns)  # thoughts split over messages
        assert [q.question for q in rendered.questions] == [q.question for q in conv.questions]
        known = {t.dia_id for t in rendered.turns}
        assert all(set(q.evidence) <= known for q in rendered.questions)
    assert sum(len(c.turns) for c in noisy) > 1.3 * sum(len(c.turns) for c in clean)


def test_a_split_answer_is_labelled_on_the_messages_that_hold_it(tmp_path: Path) -> None:
    noisy = _module("noisy_chat")
    entry = {
        "sample_id": "t-1",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1": [
                {
                    "speaker": "Melanie",
                    "dia_id": "D1:1",
                    "text": "Caroline, guess what. I painted a sunrise last week. It took ages.",
                },
            ],
        },
        "qa": [
            {"question": "What did Melanie paint?", "answer": "A sunrise", "evidence": ["D1:1"]}
        ],
    }
    out = noisy.rewrite(entry, seed=1)
    messages = out["conversation"]["session_1"]
    texts = [m["text"] for m in messages if m["speaker"] == "Melanie"]
    assert len(texts) == 3 and "Caroline" not in " ".join(texts)  # split; a nickname
    evidence = out["qa"][0]["evidence"]
    assert len(evidence) == 1
    labelled = next(m for m in messages if m["dia_id"] == evidence[0])
    assert "sun" in labelled["text"].lower()
