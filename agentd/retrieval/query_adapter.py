"""A learned linear map of the query vector toward the passages that answer it.

A question and the chat message that answers it are written differently ("What cities did
Paola visit?" and "two nights in Salzburg!"), and an embedder trained on web text places them
further apart than it places a question and a message that repeats its words. A matrix A,
trained by benchmarks/train_adapter.py on development conversations (questions and the turns
that answer them, as turns are stored: the message before, then the message), moves the query
to q + qA before the vector arm searches; the stored vectors stay as they are, so nothing is
embedded again and an index built before still serves. It is trained per embedder, for the
vectors its model id names (centre included), and skipped for any other.

The matrix is data shipped with the package (query_adapter_<embedder>.npz, beside the ranker's
weights): one 384 × 384 multiply per search, no model call, nothing fetched. Its figures, and
what it was and was not trained on, are in benchmarks/README.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

# numpy is imported where a map is read or applied, not with this module: memory search
# imports it at start, and numpy alone is ~11 MB of the idle daemon's RSS.


@dataclass(frozen=True)
class QueryAdapter:
    model_id: str  # the embedder's model id the matrix was trained for
    weights: Any  # A: numpy float32, dim × dim

    def apply(self, vector: Sequence[float]) -> list[float]:
        """q + qA, L2-normalised (the vector arm compares directions)."""
        import numpy as np

        q = np.asarray(vector, dtype=np.float32)
        moved = q + q @ self.weights
        norm = float(np.linalg.norm(moved))
        return (moved / norm).tolist() if norm > 0 else list(vector)


def adapter_path(embedder: str) -> Path:
    return Path(__file__).with_name(f"query_adapter_{embedder.replace('-', '_')}.npz")


def save_adapter(path: Path, adapter: QueryAdapter) -> None:
    import numpy as np

    weights = np.asarray(adapter.weights, dtype=np.float32)
    np.savez_compressed(path, weights=weights, model_id=np.array(adapter.model_id))


@cache
def shipped_adapter(embedder: str) -> QueryAdapter | None:
    """The adapter trained for an embedder, or None when there is none (queries go as they are)."""
    path = adapter_path(embedder)
    if not path.is_file():
        return None
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        return QueryAdapter(model_id=str(data["model_id"]), weights=data["weights"].copy())


def adapt_query(embedder: str, vector: Sequence[float], model_id: str) -> Sequence[float]:
    """The query vector as the vector arm should search with it: moved by the embedder's
    adapter when one was trained for these vectors, else as it is."""
    adapter = shipped_adapter(embedder)
    if adapter is None or adapter.model_id != model_id:
        return vector
    if adapter.weights.shape != (len(vector), len(vector)):
        return vector
    return adapter.apply(vector)
