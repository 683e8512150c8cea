"""Text handling for keyword search and the hashing embedder: words, CJK n-grams, FTS5 queries.

Why the FTS table has two columns (`content`, `fts_cjk`): `tokenize='porter unicode61'` measured
best for English conversational memory (API-NOTES), but unicode61 only splits on separators and
punctuation, so `東京で寿司を食べた` is one token and a search for `寿司` finds nothing. Trigram
tokenization cannot match two-character words either (寿司, 東京 — most Japanese and Chinese words),
so every run of CJK characters is also written, as space-separated character unigrams and bigrams,
into a second column; queries do the same to their CJK runs. Latin text keeps porter stemming.
"""

from __future__ import annotations

import re
import unicodedata

# Han, Hiragana, Katakana (incl. half-width and phonetic extensions), Hangul, CJK punctuation-free
# letters. Runs of these are split into character n-grams because they are written without spaces.
_CJK_RANGES = (
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width Katakana
    "\uac00-\ud7af"  # Hangul syllables
    "\u1100-\u11ff"  # Hangul jamo
    "\U00020000-\U0002fa1f"  # CJK extensions B-F, compatibility supplement
)
_CJK_RUN = re.compile(f"[{_CJK_RANGES}]+")
_CJK_CHAR = re.compile(f"[{_CJK_RANGES}]")
# A "word" is a run of letters/digits (Unicode-aware); CJK runs are cut out of it separately.
_WORD = re.compile(r"[^\W_]+")

# Bounds so that a 100k-character message costs a bounded query, not a pathological one.
MAX_QUERY_TERMS = 64
MAX_TERM_CHARS = 64

# Small English stopword list: question words and function words that make an OR query match
# everything (the benchmark questions are "When did X ...", "What did Y ...").
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there
    these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves s t don ll ve re d m
    o y ain isn aren wasn weren hasn haven hadn doesn didn won wouldn shouldn couldn mustn let
    also still yet ever even really like get got go going went much many one two
    """.split()
)


def normalise(text: str) -> str:
    """NFKC (full-width → ASCII, compatibility forms) and casefold; control characters dropped."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in text).casefold()


def cjk_grams(run: str) -> list[str]:
    """Character unigrams and bigrams of one CJK run ("東京" → 東, 京, 東京)."""
    grams = list(run)
    grams.extend(run[i : i + 2] for i in range(len(run) - 1))
    return grams


def cjk_index_text(text: str) -> str | None:
    """What goes into the `fts_cjk` column: n-grams of every CJK run, or None if there is none."""
    if not _CJK_CHAR.search(text):
        return None
    grams: list[str] = []
    for run in _CJK_RUN.findall(normalise(text)):
        grams.extend(cjk_grams(run))
    return " ".join(grams) or None


def split_words(text: str) -> tuple[list[str], list[str]]:
    """(latin-ish words, CJK runs) of normalised text, in order of appearance."""
    words: list[str] = []
    runs: list[str] = []
    for token in _WORD.findall(text):
        if _CJK_CHAR.search(token):
            runs.extend(_CJK_RUN.findall(token))
            words.extend(w for w in _CJK_RUN.split(token) if w)
        else:
            words.append(token)
    return words, runs


def _quote(term: str) -> str:
    # Terms contain only letters and digits already, but quoting also neutralises bare keywords
    # (AND, OR, NOT, NEAR) and column filters; doubling quotes keeps this safe if that changes.
    return '"' + term.replace('"', '""') + '"'


def query_terms(text: str) -> list[str]:
    """Distinct search terms of a user's text: non-stopword words and CJK n-grams, bounded."""
    words, runs = split_words(normalise(text))
    terms: list[str] = []
    seen: set[str] = set()

    def add(term: str) -> None:
        if term and term not in seen and len(terms) < MAX_QUERY_TERMS:
            seen.add(term)
            terms.append(term)

    for word in words:
        if word not in STOPWORDS and len(word) <= MAX_TERM_CHARS:
            add(word)
    for run in runs:
        # Bigrams carry the meaning of two-character words; a lone character is all there is.
        if len(run) == 1:
            add(run)
        for i in range(len(run) - 1):
            add(run[i : i + 2])
    if not terms:
        # A query of only stopwords ("what is it?") still deserves a keyword search.
        for word in words:
            if len(word) <= MAX_TERM_CHARS:
                add(word)
    return terms


def text_terms(text: str) -> set[str]:
    """Every word and CJK n-gram of a text, normalised as query_terms normalises a query's (for
    how many of a query's terms a stored text contains). Control characters are left in: they
    split words anyway, and normalise()'s per-character pass is most of the cost."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    if not _CJK_CHAR.search(folded):
        return set(_WORD.findall(folded))
    words, runs = split_words(folded)
    terms = set(words)
    for run in runs:
        terms.update(cjk_grams(run))
    return terms


def build_fts_query(text: str) -> str | None:
    """A MATCH expression that never raises: each term quoted, OR-joined; None when empty.

    Raw user text as a MATCH string is an implicit AND of its words (so a question matches almost
    nothing) and a syntax error on quotes, `*`, `:`, `^`, parentheses or NEAR(.
    """
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join(_quote(term) for term in terms)
