"""The query adapter: shipped for the vectors it was trained on, applied by search() to the
vector arm's query only, and never to vectors of another model."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from agentd.config.schema import MemoryConfig
from agentd.memory import NewMemory, add_memory, search
from agentd.retrieval import query_adapter
from agentd.retrieval.embedders import E5SmallEmbedder
from agentd.retrieval.fusion import TUNED_FUSION, Fusion, fusion_from_config
from agentd.retrieval.query_adapter import (
    QueryAdapter,
    adapt_query,
    save_adapter,
    shipped_adapter,
)


def test_the_shipped_adapter_is_for_the_default_embedders_vectors() -> None:
    adapter = shipped_adapter("e5-small")
    embedder = E5SmallEmbedder()
    # A new model, prefix or centre changes the model id: retrain (benchmarks/train_adapter.py).
    assert adapter is not None and adapter.model_id == embedder.model_id
    assert adapter.weights.shape == (embedder.dim, embedder.dim)
    assert adapter.weights.dtype == np.float32 and np.isfinite(adapter.weights).all()
    assert TUNED_FUSION["e5-small"].query_adapter == "e5-small"
    assert shipped_adapter("hashing") is None and TUNED_FUSION["hashing"].query_adapter is None
    # Off with the re-ranking it was trained beside.
    assert fusion_from_config(MemoryConfig()).query_adapter == "e5-small"
    assert fusion_from_config(MemoryConfig(rerank=False)).query_adapter is None


def test_a_vector_of_another_model_or_size_goes_as_it_is() -> None:
    adapter = shipped_adapter("e5-small")
    assert adapter is not None
    vector = [1.0 / math.sqrt(384)] * 384
    moved = adapt_query("e5-small", vector, adapter.model_id)
    assert moved != vector and math.isclose(float(np.linalg.norm(moved)), 1.0, rel_tol=1e-5)
    assert adapt_query("e5-small", vector, "e5-small-q4-c0/384") is vector
    assert adapt_query("e5-small", [0.6, 0.8], adapter.model_id) == [0.6, 0.8]
    assert adapt_query("hashing", vector, "hashing/384") is vector


def test_saved_and_loaded_it_is_the_same_map(tmp_path: Path, monkeypatch: Any) -> None:
    swap = np.array([[-1.0, 1.0], [1.0, -1.0]], dtype=np.float32)  # q + qA swaps the two axes
    path = tmp_path / "query_adapter_toy.npz"
    save_adapter(path, QueryAdapter("toy/2", swap))
    monkeypatch.setattr(query_adapter, "adapter_path", lambda name: path)
    shipped_adapter.cache_clear()
    try:
        loaded = shipped_adapter("toy")
        assert loaded is not None and loaded.model_id == "toy/2"
        assert adapt_query("toy", [1.0, 0.0], "toy/2") == pytest.approx([0.0, 1.0])
    finally:
        shipped_adapter.cache_clear()


def axis(i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(8)]


def test_search_moves_only_the_vector_arms_query(conn: Any, monkeypatch: Any) -> None:
    """Two memories along two axes; the adapter maps the first axis onto the second, so the
    vector arm finds the second for a query along the first. Keyword search is untouched."""
    swap = np.eye(8, dtype=np.float32)[[1, 0, 2, 3, 4, 5, 6, 7]] - np.eye(8, dtype=np.float32)
    monkeypatch.setattr(
        query_adapter,
        "shipped_adapter",
        lambda name: QueryAdapter("toy/8", swap) if name == "toy" else None,
    )
    ids = [
        add_memory(conn, NewMemory(user_id=1, kind="note", content=text), vec, "toy/8")
        for text, vec in (("tea in the morning", axis(0)), ("coffee at noon", axis(1)))
    ]
    plain = Fusion(method="rrf", depth=5)
    adapted = plain.model_copy(update={"query_adapter": "toy"})

    def first(fusion: Fusion, mode: str, text: str = "what do I drink") -> int:
        hits = search(conn, 1, text, axis(0), "toy/8", k=1, mode=mode, fusion=fusion)  # type: ignore[arg-type]
        return hits[0].memory.id

    assert first(plain, "vector") == ids[0]
    assert first(adapted, "vector") == ids[1]
    assert first(adapted, "keyword", "tea") == ids[0]
    # Another model's vectors are searched as embedded.
    other = adapted.model_copy(update={"query_adapter": "hashing"})
    assert first(other, "vector") == ids[0]


def _train_adapter() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "train_adapter", Path(__file__).resolve().parents[1] / "benchmarks" / "train_adapter.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_adapter"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _unit(x: Any) -> Any:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_training_learns_a_map_that_holds_on_a_conversation_it_did_not_see() -> None:
    """Questions written "differently" from their answers (a fixed rotation of the answer's
    vector, plus noise): the map trained on two conversations finds the third's answers."""
    ta = _train_adapter()
    rng = np.random.default_rng(11)
    dim = 16
    g = rng.standard_normal((dim, dim))
    skew = 0.5 * (g - g.T) / 2  # a rotation (Cayley) far enough that cosine alone misses
    rotation = np.linalg.solve(np.eye(dim) - skew, np.eye(dim) + skew)
    convs = []
    for k in range(3):
        docs = _unit(rng.standard_normal((40, dim))).astype(np.float32)
        answers = rng.choice(40, 20, replace=False)
        noise = 0.05 * rng.standard_normal((20, dim))
        queries = _unit(docs[answers] @ rotation.T + noise).astype(np.float32)
        positives = [[int(a)] for a in answers]
        convs.append(
            ta.Conv(id=f"c{k}", data="toy", docs=docs, queries=queries, positives=positives)
        )
    adapters = ta.fold_adapters(convs, "toy/16")
    assert set(adapters) == {"c0", "c1", "c2", ta.ALL}
    held = convs[0]
    raw = np.mean(ta.recall(held, held.queries, 1))
    moved = np.mean(ta.recall(held, ta.adapted(adapters["c0"], held.queries), 1))
    assert moved >= raw + 0.3, (raw, moved)


def test_pool_negatives_train_against_the_pool_alone() -> None:
    """`--negatives pool`: the softmax runs over the question's pool, so turns outside it change
    neither the loss nor the gradient; the same conversation cut to its pool gives both."""
    ta = _train_adapter()
    rng = np.random.default_rng(5)
    docs = _unit(rng.standard_normal((12, 8))).astype(np.float32)
    queries = _unit(rng.standard_normal((2, 8))).astype(np.float32)
    a = (0.1 * rng.standard_normal((8, 8))).astype(np.float32)
    pool = [0, 3, 4, 7]
    whole = ta.Conv(id="c", data="toy", docs=docs, queries=queries, positives=[[3], [7, 0]])
    whole.pools = [pool, pool]
    cut = ta.Conv(id="c", data="toy", docs=docs[pool], queries=queries, positives=[[1], [3, 0]])
    (g_pool, loss_pool), (g_cut, loss_cut) = ta.gradient(whole, a), ta.gradient(cut, a)
    assert loss_pool == pytest.approx(loss_cut, rel=1e-5)
    assert np.allclose(g_pool, g_cut, atol=1e-5)
    whole.pools = None  # every turn: the distractors outside the pool now count
    assert ta.gradient(whole, a)[1] > loss_pool + 1e-3
