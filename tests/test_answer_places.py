"""A question that asks for a place (retrieval/places.py) and what re-ranking makes of it."""

from __future__ import annotations

import pytest

from agentd.retrieval.places import asks_place, names_place
from agentd.retrieval.rerank import FEATURES, Candidate, feature_rows, rerank, shipped_ranker


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("Where is Paola planning to go on 16.01.2024?", True),
        ("What cities did Kate visit?", True),
        ("Which countries has Nicolas been to?", True),
        ("which beach did we go to", True),
        ("What Italian restaurants does Emi like?", True),
        ("What recipes did Paola try?", False),
        ("When did Kate visit Rome?", False),
        ("Who did Emi meet in Paris?", False),
        # A word that only contains one of the place words is not one.
        ("What statement did Kevin make?", False),
    ],
)
def test_a_question_asks_for_a_place(question: str, asks: bool) -> None:
    assert asks_place(question) is asks


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("Paola: We spent the weekend in Rome and then Florence!", True),
        ("Kate: flying to the Maldives next week", True),
        ("just got back from Lisbon", True),
        ("Emi: we're visiting Kyoto in April", True),
        ("dinner at Luigi's was lovely", True),
        # Lower case, a name with no word leading to it, a sentence's first word: not read.
        ("we spent the weekend in rome", False),
        ("Rome was amazing", False),
        ("Paola: I love my cat so much", False),
        ("I'm in love with this song", False),
    ],
)
def test_a_text_names_a_place(text: str, names: bool) -> None:
    assert names_place(text) is names


def _talk(text: str) -> Candidate:
    return Candidate(content=text, context=None, shape="talk", neighbours=())


def test_a_question_asking_for_a_place_lifts_the_message_that_names_one() -> None:
    """Two of Paola's messages about her trip, the first the better keyword match, the second
    the vector arm's first and the one naming where she went. Asked what she thought of it,
    the first leads; asked where she went, the one naming the place does. A ranker that
    ignores the feature, or a feature that never fires, fails here."""
    candidates = {
        1: _talk("Paola: the trip was so relaxing, best trip of the year, I needed that trip"),
        2: _talk("Paola: we stayed two nights in Salzburg, then took the train home"),
    }
    fused, kw, vec = [(1, 1.0), (2, 0.9)], [(1, -6.0), (2, -5.0)], [(2, 0.30), (1, 0.32)]
    place = FEATURES.index("names_place")
    where = "Where did Paola go on her trip?"
    rows = feature_rows(where, kw, vec, fused, candidates)
    assert rows[2][place] == 1.0 and rows[1][place] == 0.0
    what = "What did Paola think of her trip?"
    assert all(row[place] == 0.0 for row in feature_rows(what, kw, vec, fused, candidates).values())
    ranker = shipped_ranker("e5-small")
    assert ranker is not None and ranker.weights["names_place"] > 0

    def first(text: str) -> int:
        return rerank(ranker, text, kw, vec, fused, candidates)[0][0]

    assert first(what) == 1
    assert first(where) == 2
