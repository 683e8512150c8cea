"""Helpers of memory_retrieval.py: an embedding cache, leave-one-conversation-out tuning, and the
question variants that measure query building from recent turns.

Cross-validation: with n conversations, each one in turn is held out; the fusion weights are
chosen on the other n-1 (best mean R@5 over the sweep grid) and scored on the held-out one, so
the reported figure never saw the conversation it is measured on.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentd.retrieval.embedders import Embedder, Vector
from agentd.retrieval.fusion import Fusion, fuse


class CachedEmbedder:
    """Wraps an embedder and keeps its vectors in a JSON file between runs (by text hash), so a
    re-run of the benchmark on the same data costs no model time. Same model_id and dim, so the
    store cannot tell the difference."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.path = path
        self._cache: dict[str, list[float]] = (
            json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        )
        self._dirty = False

    def _key(self, role: str, text: str) -> str:
        return hashlib.sha1(f"{self.model_id}\0{role}\0{text}".encode()).hexdigest()

    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        missing = [t for t in texts if self._key("d", t) not in self._cache]
        if missing:
            for text, vec in zip(missing, await self.inner.embed_documents(missing), strict=True):
                self._cache[self._key("d", text)] = list(vec)
            self._dirty = True
        return [self._cache[self._key("d", t)] for t in texts]

    async def embed_query(self, text: str) -> Vector:
        key = self._key("q", text)
        if key not in self._cache:
            self._cache[key] = list(await self.inner.embed_query(text))
            self._dirty = True
        return self._cache[key]

    def save(self) -> None:
        if self._dirty:
            self.path.write_text(json.dumps(self._cache), encoding="utf-8")
            self._dirty = False

    async def aclose(self) -> None:
        self.save()
        await self.inner.aclose()


# One scored question: (conversation, evidence ids, keyword list, vector list, id → dia ids).
Scored = tuple[str, Sequence[str], list[tuple[int, float]], list[tuple[int, float]]]


def recall_at(ids: Sequence[int], owner: dict[int, str], evidence: Sequence[str], k: int) -> float:
    top = {owner[i] for i in ids[:k] if i in owner}
    return sum(1 for e in evidence if e in top) / len(evidence)


def fused_r5(rows: Sequence[Scored], owner: dict[int, str], fusion: Fusion) -> dict[str, float]:
    """R@5 per conversation of fuse() with these weights."""
    per: dict[str, list[float]] = defaultdict(list)
    for conv, evidence, kw, vec in rows:
        ids = [mid for mid, _ in fuse(kw, vec, fusion)]
        per[conv].append(recall_at(ids, owner, evidence, 5))
    return {c: statistics.fmean(v) for c, v in per.items()}


def cross_validate(
    rows: Sequence[Scored], owner: dict[int, str], grid: Sequence[Fusion]
) -> list[dict[str, Any]]:
    """Leave one conversation out: tune on the rest (mean of their R@5), score on it."""
    table = [(f, fused_r5(rows, owner, f)) for f in grid]
    convs = sorted({r[0] for r in rows})
    counts = {c: sum(1 for r in rows if r[0] == c) for c in convs}
    out = []
    for held in convs:
        others = [c for c in convs if c != held]
        if not others:
            break

        def tuned_score(item: tuple[Fusion, dict[str, float]], others: list[str] = others) -> float:
            per = item[1]
            total = sum(counts[c] for c in others)
            return sum(per.get(c, 0.0) * counts[c] for c in others) / total

        best, per = max(table, key=tuned_score)
        out.append(
            {
                "held_out": held,
                "questions": counts[held],
                "tuned": best.model_dump(),
                "tuned_R@5": round(tuned_score((best, per)), 4),
                "held_out_R@5": round(per.get(held, 0.0), 4),
            }
        )
    return out


def pooled(folds: Sequence[dict[str, Any]]) -> float:
    """Held-out R@5 over all questions (each fold weighted by its questions)."""
    total = sum(f["questions"] for f in folds)
    return sum(f["held_out_R@5"] * f["questions"] for f in folds) / total if total else 0.0


# --------------------------------------------------------------------------------------------
# Questions as a chat would ask them: the person named in the turn before, a pronoun now


_POSSESSIVE = re.compile(r"\b([A-Z][a-z]+)'s\b")


def pronoun_variant(question: str, names: Sequence[str]) -> tuple[str, str] | None:
    """("What did she research?", "Caroline") from "What did Caroline research?", or None when
    the question names none of the speakers. "they"/"their" stand in for any name."""
    for name in names:
        if re.search(rf"\b{re.escape(name)}\b", question):
            text = re.sub(rf"\b{re.escape(name)}'s\b", "their", question, count=1)
            text = re.sub(rf"\b{re.escape(name)}\b", "they", text, count=1)
            return text, name
    return None


def chat_questions(
    questions: Sequence[str], names: Sequence[str]
) -> list[tuple[str, list[str]] | None]:
    """Each question as (message with a pronoun, recent turns): the recent turn is the previous
    question of the file that names the same person, as an owner would have asked it just
    before; None where the question names nobody or nobody was named before."""
    last_naming: dict[str, str] = {}
    out: list[tuple[str, list[str]] | None] = []
    for question in questions:
        variant = pronoun_variant(question, names)
        if variant is None:
            out.append(None)
            continue
        message, name = variant
        previous = last_naming.get(name)
        out.append((message, [previous]) if previous else None)
        last_naming[name] = question
    return out


Rewrite = Callable[[str, Sequence[str]], str]
