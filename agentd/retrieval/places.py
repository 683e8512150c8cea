"""Whether a question asks for a place, and whether a text names one.

"Where is Paola planning to go?", "What cities did Kate visit?": the answer is a message that
names a place ("we spent the weekend in Rome"), and its words are rarely the question's, so
neither arm ranks it for its words. Re-ranking (rerank.py) gives such a candidate a feature of
its own when the question asks for a place. This is answer-type matching as question-answering
retrieval has long done it, kept to the one type that lifted recall on real chat: matching a
time, a number or a person did not (docs/benchmarks-history.md).

English only, and only a capitalised name after a word that leads to a place ("in", "to",
"from", "at", "near", "visit"): "in rome" is missed, as is every other language; the feature
then stays 0 and ranking is what it was without it. No model call.
"""

from __future__ import annotations

import re

_PLACE_WORDS = (
    r"cit(?:y|ies)|countr(?:y|ies)|places?|destinations?|locations?|restaurants?|towns?"
    r"|states?|parks?|beach(?:es)?"
)
_ASKS = re.compile(
    r"\bwhere\b|\b(?:what|which) (?:\w+ )?(?:" + _PLACE_WORDS + r")\b", re.IGNORECASE
)
_NAMES = re.compile(r"\b(?:in|to|from|at|near|around|visit(?:ed|ing)?)\s+(?:the\s+)?[A-Z][a-z]+")


def asks_place(question: str) -> bool:
    """True when the question asks where, or for a city, country, place and the like."""
    return _ASKS.search(question) is not None


def names_place(text: str) -> bool:
    """True when the text names a place the way English does: "in Rome", "to the Alps"."""
    return _NAMES.search(text) is not None
