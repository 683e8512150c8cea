"""The learned re-ranking of fused memory hits: the shipped weights, what the features reward,
and that search() uses it without crossing users or losing the cut to k."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from agentd.config.schema import MemoryConfig
from agentd.memory import HashingEmbedder, NewMemory, add_memory, search
from agentd.memory.search import ranker_pool, rerank_candidates
from agentd.retrieval.fts import query_terms, text_terms
from agentd.retrieval.fusion import TUNED_FUSION, fusion_from_config
from agentd.retrieval.rerank import FEATURES, Candidate, feature_rows, rerank, shipped_ranker


def test_the_shipped_ranker_weighs_every_feature_and_only_for_its_embedder() -> None:
    ranker = shipped_ranker("e5-small")
    assert ranker is not None and set(ranker.weights) == set(FEATURES)  # retrain on a change
    assert shipped_ranker("hashing") is None  # nothing trained: fusion alone
    assert fusion_from_config(MemoryConfig()).ranker == "e5-small"
    assert fusion_from_config(MemoryConfig(rerank=False)).ranker is None
    assert fusion_from_config(MemoryConfig(embedder="hashing")).ranker is None
    # A config without the key (an older section object) keeps the embedder's ranker.
    older = SimpleNamespace(embedder="e5-small", **dict.fromkeys(_KEYS))
    assert fusion_from_config(older).ranker == "e5-small"


_KEYS = ("fusion", "keyword_weight", "vector_weight", "rrf_k", "fusion_depth")


def _talk(text: str, *neighbours: int, context: str | None = None) -> Candidate:
    return Candidate(content=text, context=context, shape="talk", neighbours=neighbours)


def test_an_answer_beats_a_question_back_and_a_hit_beside_the_match_rises() -> None:
    ranker = shipped_ranker("e5-small")
    assert ranker is not None
    text = "Where did Melanie go camping with her kids?"

    def alone(candidate: Candidate) -> float:
        """Its score in the top slot of both arms, so only what it says differs."""
        ranked = rerank(ranker, text, [(1, -5.0)], [(1, 0.2)], [(1, 1.0)], {1: candidate})
        return ranked[0][1]

    question_back = alone(_talk("Melanie: did you ever go camping with your kids?"))
    answer = alone(_talk("Melanie: we went camping with the kids at the beach in July"))
    assert answer > question_back
    # 3 and 4 look alike; 4 sits beside the best fused hit (5), so it is more likely the answer.
    candidates = {
        3: _talk("Caroline: that sounds lovely"),
        4: _talk("Caroline: that sounds lovely", 5),
        5: _talk("Melanie: camping with the kids this weekend"),
    }
    fused = [(5, 1.0), (3, 0.1), (4, 0.1)]
    kw = [(5, -9.0), (3, -1.0), (4, -1.0)]
    order = [mid for mid, _ in rerank(ranker, text, kw, kw, fused, candidates)]
    assert order.index(4) < order.index(3)
    # An id whose memory is gone (deleted meanwhile) is dropped, not guessed at.
    assert 6 not in dict(rerank(ranker, text, kw, kw, [*fused, (6, 0.5)], candidates))


def test_coverage_counts_the_query_terms_a_text_holds_in_any_script() -> None:
    rows = feature_rows(
        "東京の寿司 and Ｌｉｓｂｏｎ",
        [(1, -2.0)],
        [(1, 0.3)],
        [(1, 1.0)],
        {1: _talk("We ate 寿司 in lisbon", context="東京")},
    )
    cover_content = rows[1][FEATURES.index("cover_content")]
    cover_context = rows[1][FEATURES.index("cover_context")]
    wanted = set(query_terms("東京の寿司 and Ｌｉｓｂｏｎ"))
    assert cover_content == len(wanted & text_terms("We ate 寿司 in lisbon")) / len(wanted) > 0
    assert cover_context > 0 and "lisbon" in text_terms("LISBON\x00trip")


def test_search_reranks_only_the_users_own_memories(conn: Any) -> None:
    embedder = HashingEmbedder()
    texts = {
        1: ["we booked flights to Lisbon", "for the first week of May", "thanks!"],
        2: ["my flights to Lisbon are in June", "Lisbon Lisbon Lisbon flights"],
    }
    ids: dict[int, list[int]] = {}
    for user, lines in texts.items():
        for line in lines:
            vec = asyncio.run(embedder.embed_documents([line]))[0]
            mid = add_memory(
                conn,
                NewMemory(user_id=user, kind="turn", content=line, chat_id=user),
                vec,
                embedder.model_id,
            )
            ids.setdefault(user, []).append(mid)
    fusion = TUNED_FUSION["hashing"].model_copy(update={"ranker": "e5-small"})
    qvec = asyncio.run(embedder.embed_query("when are the Lisbon flights?"))
    hits = search(
        conn, 1, "when are the Lisbon flights?", qvec, embedder.model_id, k=2, fusion=fusion
    )
    assert len(hits) == 2 and all(h.memory.user_id == 1 for h in hits)
    assert hits[0].memory.id == ids[1][0]
    # The candidates' read re-checks the owner, whatever ids it is handed.
    assert set(rerank_candidates(conn, 1, ids[1] + ids[2])) == set(ids[1])
    assert rerank_candidates(conn, 1, ids[1])[ids[1][1]].neighbours == (ids[1][0], ids[1][2])


def test_length_and_coverage_are_also_read_against_the_other_candidates() -> None:
    """Chats differ in how long a message is and how much of a question one message can hold,
    so the ranker also sees each candidate beside the others of its search."""
    text = "Where did Melanie go camping with her kids?"
    candidates = {
        1: _talk("Melanie: camping at the lake"),
        2: _talk("Melanie: we went camping with the kids at the beach in July, it was lovely"),
        3: _talk("Caroline: lol"),
    }
    fused = [(1, 1.0), (2, 0.5), (3, 0.2)]
    rows = feature_rows(text, fused, fused, fused, candidates)
    longer = FEATURES.index("longer")
    best = FEATURES.index("cover_best")
    assert rows[2][longer] > 0 > rows[3][longer]
    assert sum(row[longer] for row in rows.values()) == pytest.approx(0.0)
    assert rows[2][best] == 1.0 and 0 < rows[1][best] < 1.0 and rows[3][best] == 0.0


def test_the_pool_adds_the_stored_neighbours_of_the_top_hits(conn: Any) -> None:
    ids = [
        add_memory(conn, NewMemory(user_id=1, kind="turn", content=text, chat_id=1))
        for text in ("went to the lake", "w the kids", "on sunday", "lol", "what about u")
    ]
    other = add_memory(conn, NewMemory(user_id=2, kind="turn", content="lake", chat_id=1))
    fused = [(ids[1], 1.0), (ids[4], 0.4)]
    pool, candidates = ranker_pool(conn, 1, fused, expand=1)
    # Only the top hit lends its neighbours, after the fused list, at a fused score of 0.
    assert pool == [*fused, (ids[0], 0.0), (ids[2], 0.0)]
    assert set(candidates) == {ids[0], ids[1], ids[2], ids[4]} and other not in candidates
    assert ranker_pool(conn, 1, fused, expand=0)[0] == fused
    assert ranker_pool(conn, 1, [], expand=5) == ([], {})
