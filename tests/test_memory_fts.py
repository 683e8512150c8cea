"""Keyword search never raises on hostile input and works for CJK text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.memory.search import keyword_search, search
from agentd.memory.store import NewMemory, add_memory
from agentd.retrieval.fts import build_fts_query, cjk_index_text, query_terms

HOSTILE = [
    '"',
    '""',
    "'",
    "AND",
    "OR",
    "NOT",
    "a AND b OR NOT c",
    "NEAR(",
    "NEAR(sushi tokyo, 2)",
    "*",
    "sush*",
    "-",
    "-sushi",
    "+sushi",
    "^sushi",
    "content:sushi",
    "fts_cjk:寿司",
    "(sushi",
    "sushi)",
    "{content fts_cjk}: x",
    "sushi OR",
    "🍣🍣🍣",
    "I love 🍣 and 🗼",
    "东京 寿司",
    "東京で寿司を食べた",
    "\x00\x01\x02 control \x1b[31m chars",
    "",
    "   \n\t  ",
    "?!.,;:",
    "x" * 100_000,
    "sushi " * 20_000,
    "ｓｕｓｈｉ（全角）",
    "Ünïcödé café naïve",
    "ด้วยความรัก",  # Thai, no spaces
    "서울에서 초밥을 먹었다",
]


@pytest.fixture
def conn(tmp_path: Path) -> Any:
    c = open_sync(tmp_path / "fts.db")
    apply_migrations(c)
    for text in (
        "I ate sushi in Tokyo",
        "東京で寿司を食べた",
        "서울에서 초밥을 먹었다",
        "Café au lait",
    ):
        add_memory(c, NewMemory(user_id=1, kind="note", content=text))
    yield c
    c.close()


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:20]))
def test_hostile_input_never_raises(conn: Any, text: str) -> None:
    query = build_fts_query(text)
    assert query is None or query.count('"') % 2 == 0
    keyword_search(conn, 1, text, 10)
    search(conn, 1, text, None, None, k=5)


def test_empty_and_symbol_only_queries_build_nothing() -> None:
    for text in ("", "   ", "🍣", "?!", '"*()'):
        assert build_fts_query(text) is None


def test_query_is_or_of_quoted_terms_without_stopwords() -> None:
    assert build_fts_query("What did Maria eat in Tokyo?") == '"maria" OR "eat" OR "tokyo"'
    # Operators become plain quoted terms ("and" is a stopword).
    assert build_fts_query("NEAR(cats AND dogs)") == '"near" OR "cats" OR "dogs"'


def test_terms_are_bounded() -> None:
    assert len(query_terms(" ".join(f"word{i}" for i in range(10_000)))) == 64


def test_two_character_japanese_word_is_found(conn: Any) -> None:
    hits = search(conn, 1, "寿司", None, None, k=3, mode="keyword")
    assert [h.memory.content for h in hits][:1] == ["東京で寿司を食べた"]
    hits = search(conn, 1, "東京で何を食べましたか", None, None, k=3, mode="keyword")
    assert hits and hits[0].memory.content == "東京で寿司を食べた"


def test_korean_and_diacritics(conn: Any) -> None:
    assert search(conn, 1, "초밥", None, None, mode="keyword")[0].memory.content.startswith("서울")
    assert search(conn, 1, "cafe", None, None, mode="keyword")[0].memory.content == "Café au lait"


def test_porter_stemming_matches_inflections(conn: Any) -> None:
    add_memory(conn, NewMemory(user_id=1, kind="note", content="She was running marathons"))
    hits = search(conn, 1, "run a marathon", None, None, mode="keyword")
    assert hits[0].memory.content == "She was running marathons"


def test_cjk_index_text() -> None:
    assert cjk_index_text("plain english") is None
    assert cjk_index_text("東京") == "東 京 東京"
