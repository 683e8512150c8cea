"""Keyword-search ideas for chat-like text, measured on the keyword arm alone (no embedder).

    python benchmarks/keyword_ideas.py --data ../shared/data/locomo-dev.json
    python benchmarks/keyword_ideas.py --data /tmp/noisy-dev.json   # noisy_chat.py's rendering

Each conversation's turns go into an in-memory FTS5 table the way memory_fts holds them
(`porter unicode61`; content, then what it answers, then what is nearby) and every question is
searched with the production query (fts.build_fts_query). Printed per idea: R@5, R@10 and R@5 of
the questions whose evidence spans several sessions. The ideas:

- typo tolerance: a trigram index of the content (FTS5 `trigram`) searched with the trigrams of
  the query's words of 4+ letters, alone and min-max fused with the porter list; and fuzzy
  expansion, the query's words of 4+ (or 5+) letters joined by every word of the conversation
  one edit away (Damerau) that starts with the same letter;
- what a turn carries for keyword search: the message before it (what agentd stored), the
  speaker's run of messages around it ("burst"), windows of 1-3 messages each side, only the 2-3
  before, windows of 150-600 characters, the window only for turns under n words ("adapt"),
  and the window as a column of its own beside the message before ("nearby", what ships), at
  several column weights;
- BM25's two constants: FTS5's `bm25()` fixes k1 = 1.2 and b = 0.75 (b: how much a long message
  is discounted); "bm25 k1 K b B" recomputes FTS5's formula (its IDF, its column weights, the
  row's tokens over the table's mean) from the table's `fts5vocab` instances with other values.
  At 1.2 / 0.75 it gives FTS5's own figures to within ties.

Scratch figures for choosing; the numbers the choice rests on are benchmarks/README.md's.
"""

from __future__ import annotations

import argparse
import math
import re
import sqlite3
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.retrieval.fts import build_fts_query, normalise, query_terms
from benchmarks.memory_retrieval import Conversation, Turn, load_dataset, spread, window_contexts

_WORD = re.compile(r"[^\W_]+")
Search = Callable[[str, int, int], list[int]]  # question, first id, last id → ids, best first


def _session(turn: Turn) -> str:
    return turn.dia_id.split(":")[0]


def _speaker(turn: Turn) -> str:
    return turn.text.split(":", 1)[0]


def contexts(turns: Sequence[Turn], mode: str) -> list[str | None]:
    """What each turn carries as its context column under `mode` (module docstring)."""
    out: list[str | None] = []
    for i, turn in enumerate(turns):

        def same(j: int, i: int = i) -> bool:
            return 0 <= j < len(turns) and _session(turns[j]) == _session(turns[i])

        if mode == "previous":
            out.append(turn.context)
            continue
        if mode.startswith("adapt"):
            if len(turn.text.split(":", 1)[-1].split()) >= int(mode[5:]):
                out.append(turn.context)
                continue
            mode_here = "win2"
        else:
            mode_here = mode
        if mode_here.startswith("win"):
            n = int(mode_here[3:])
            parts = [turns[j].text for j in range(i - n, i + n + 1) if j != i and same(j)]
        elif mode_here.startswith("back"):
            parts = [turns[j].text for j in range(i - int(mode_here[4:]), i) if same(j)]
        elif mode_here.startswith("chars"):
            budget, used, found = int(mode_here[5:]), 0, {}
            for d in range(1, 50):
                grew = False
                for j in (i - d, i + d):
                    if same(j) and used < budget:
                        found[j] = turns[j].text
                        used += len(turns[j].text)
                        grew = True
                if not grew:
                    break
            parts = [found[j] for j in sorted(found)]
        else:  # burst: the speaker's run around it, and the message before the run
            a = b = i
            while same(a - 1) and _speaker(turns[a - 1]) == _speaker(turn):
                a -= 1
            while same(b + 1) and _speaker(turns[b + 1]) == _speaker(turn):
                b += 1
            parts = [turns[a - 1].text] if same(a - 1) else []
            parts += [turns[j].text for j in range(a, b + 1) if j != i]
        out.append("\n".join(parts) or None)
    return out


class Index:
    """One FTS5 table of every conversation's turns; ids run per conversation in order."""

    def __init__(self, convs: Sequence[Conversation], mode: str) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute(
            "CREATE VIRTUAL TABLE f USING fts5(content, context, nearby,"
            " tokenize='porter unicode61')"
        )
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='trigram')")
        self.db.execute("CREATE VIRTUAL TABLE fv USING fts5vocab(f, 'instance')")
        self.owner: dict[int, str] = {}
        self.ranges: list[tuple[int, int]] = []
        self.vocab: list[set[str]] = []
        rid = 0
        for conv in convs:
            first = rid + 1
            nearby = [None] * len(conv.turns)
            if mode == "nearby":
                nearby = _windows(conv.turns)
            own = contexts(conv.turns, "previous" if mode == "nearby" else mode)
            words: set[str] = set()
            for turn, context, near in zip(conv.turns, own, nearby, strict=True):
                rid += 1
                self.owner[rid] = turn.dia_id
                self.db.execute(
                    "INSERT INTO f (rowid, content, context, nearby) VALUES (?, ?, ?, ?)",
                    (rid, turn.text, context, near),
                )
                self.db.execute("INSERT INTO t (rowid, content) VALUES (?, ?)", (rid, turn.text))
                words.update(_WORD.findall(normalise(turn.text)))
            self.ranges.append((first, rid))
            self.vocab.append(words)

    def porter(self, match: str | None, lo: int, hi: int, weights: str) -> list[tuple[int, float]]:
        if not match:
            return []
        return self.db.execute(
            f"SELECT rowid, bm25(f, {weights}) AS s FROM f WHERE f MATCH ?"
            " AND rowid BETWEEN ? AND ? ORDER BY s LIMIT 50",
            (match, lo, hi),
        ).fetchall()

    def trigram(self, text: str, lo: int, hi: int) -> list[tuple[int, float]]:
        grams: list[str] = []
        for term in query_terms(text):
            if len(term) >= 4:
                grams += [g for i in range(len(term) - 2) if (g := term[i : i + 3]) not in grams]
        if not grams:
            return []
        match = " OR ".join('"' + g.replace('"', '""') + '"' for g in grams)
        return self.db.execute(
            "SELECT rowid, bm25(t) AS s FROM t WHERE t MATCH ? AND rowid BETWEEN ? AND ?"
            " ORDER BY s LIMIT 50",
            (match, lo, hi),
        ).fetchall()


_COLUMN_WEIGHTS = MappingProxyType({"content": 1.0, "context": 0.5, "nearby": 0.5})


class Bm25:
    """FTS5's bm25() over `f` with the column weights 1.0 / 0.5 / 0.5, k1 and b as given."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.hits: dict[str, dict[int, float]] = {}  # term → row → weighted count
        self.tokens: dict[int, int] = {}
        for term, row, col in index.db.execute("SELECT term, doc, col FROM fv"):
            per_row = self.hits.setdefault(term, {})
            per_row[row] = per_row.get(row, 0.0) + _COLUMN_WEIGHTS[col]
            self.tokens[row] = self.tokens.get(row, 0) + 1
        self.rows = len(index.owner)
        self.mean = sum(self.tokens.values()) / max(1, len(self.tokens))
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE q USING fts5(x, tokenize='porter unicode61')")
        self.db.execute("CREATE VIRTUAL TABLE qv USING fts5vocab(q, 'row')")

    def stems(self, text: str) -> list[str]:
        self.db.execute("DELETE FROM q")
        self.db.execute("INSERT INTO q (x) VALUES (?)", (" ".join(query_terms(text)),))
        return [term for (term,) in self.db.execute("SELECT term FROM qv")]

    def search(self, text: str, lo: int, hi: int, k1: float, b: float) -> list[int]:
        score: dict[int, float] = {}
        for term in self.stems(text):
            rows = self.hits.get(term, {})
            idf = max(math.log((self.rows - len(rows) + 0.5) / (len(rows) + 0.5)), 1e-6)
            for row, f in rows.items():
                if lo <= row <= hi:
                    norm = k1 * (1 - b + b * self.tokens[row] / self.mean)
                    score[row] = score.get(row, 0.0) + idf * f * (k1 + 1) / (f + norm)
        return sorted(score, key=lambda r: (-score[r], r))[:50]


def _windows(turns: Sequence[Turn]) -> list[str | None]:
    out: list[str | None] = [None] * len(turns)
    sessions: dict[str, list[int]] = {}
    for i, turn in enumerate(turns):
        sessions.setdefault(_session(turn), []).append(i)
    for members in sessions.values():
        for i, text in zip(members, window_contexts([turns[i].text for i in members]), strict=True):
            out[i] = text
    return out


def one_edit(a: str, b: str) -> bool:
    """Whether b is a at one edit (insert, delete, substitute, swap of neighbours), a != b."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long[i]:
        i += 1
    return short[i:] == long[i + 1 :]


def _fused(a: list[tuple[int, float]], b: list[tuple[int, float]], w: float) -> list[int]:
    def stretch(items: list[tuple[int, float]]) -> dict[int, float]:
        if not items:
            return {}
        vals = [-s for _, s in items]
        lo, hi = min(vals), max(vals)
        return {r: (-s - lo) / (hi - lo) if hi > lo else 1.0 for r, s in items}

    score: dict[int, float] = {}
    for weight, part in ((1 - w, stretch(a)), (w, stretch(b))):
        for rid, v in part.items():
            score[rid] = score.get(rid, 0.0) + weight * v
    return sorted(score, key=lambda r: (-score[r], r))


def variants(index: Index, conv_no: int, bm25: Bm25) -> dict[str, Search]:
    """The searches of one index (module docstring), each by name."""

    def porter(weights: str) -> Search:
        return lambda q, lo, hi: [r for r, _ in index.porter(build_fts_query(q), lo, hi, weights)]

    def fuzzy(minlen: int) -> Search:
        def search(q: str, lo: int, hi: int) -> list[int]:
            terms = query_terms(q)
            extra = [
                w
                for t in terms
                if len(t) >= minlen
                for w in sorted(index.vocab[conv_no])
                if w[0] == t[0] and one_edit(t, w) and w not in terms
            ]
            match = " OR ".join(f'"{x}"' for x in dict.fromkeys(terms + extra)) or None
            return [r for r, _ in index.porter(match, lo, hi, "1.0, 0.5, 0.5")]

        return search

    out: dict[str, Search] = {"porter": porter("1.0, 0.5, 0.5")}
    return (
        out
        | {
            "trigram": lambda q, lo, hi: [r for r, _ in index.trigram(q, lo, hi)],
            "porter+trigram 0.2": lambda q, lo, hi: _fused(
                index.porter(build_fts_query(q), lo, hi, "1.0, 0.5, 0.5"),
                index.trigram(q, lo, hi),
                0.2,
            ),
            "fuzzy 4+": fuzzy(4),
            "fuzzy 5+": fuzzy(5),
            "context 0.3": porter("1.0, 0.3, 0.3"),
            "context 0.7": porter("1.0, 0.7, 0.7"),
            "context 0.5, nearby 0.3": porter("1.0, 0.5, 0.3"),
            "context 0.3, nearby 0.3": porter("1.0, 0.3, 0.3"),
        }
        | {
            f"bm25 k1 {k1} b {b}": lambda q, lo, hi, k1=k1, b=b: bm25.search(q, lo, hi, k1, b)
            for k1 in (0.6, 1.2, 2.0)
            for b in (0.0, 0.3, 0.5, 0.75, 1.0)
        }
    )


def run(convs: list[Conversation], mode: str, names: Sequence[str]) -> None:
    index = Index(convs, mode)
    bm25 = Bm25(index)
    table: dict[str, dict[str, list[float]]] = {}
    for n, conv in enumerate(convs):
        lo, hi = index.ranges[n]
        searches = variants(index, n, bm25)
        for name in names or searches:
            if name not in searches:
                continue
            cell = table.setdefault(name, {"R@5": [], "R@10": [], "several": []})
            for q in conv.questions:
                ids = searches[name](q.question, lo, hi)
                for k in (5, 10):
                    top = {index.owner[r] for r in ids[:k]}
                    cell[f"R@{k}"].append(sum(e in top for e in q.evidence) / len(q.evidence))
                if spread(q.evidence) == "several sessions":
                    cell["several"].append(cell["R@5"][-1])
    for name, cell in table.items():
        print(
            f"{mode:10} {name:26} R@5 {statistics.fmean(cell['R@5']):.3f}"
            f"  R@10 {statistics.fmean(cell['R@10']):.3f}"
            f"  several R@5 {statistics.fmean(cell['several']) if cell['several'] else 0:.3f}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument(
        "--modes",
        nargs="+",
        default=[
            "previous",
            "burst",
            "win1",
            "win2",
            "win3",
            "back2",
            "back3",
            "chars150",
            "chars250",
            "chars400",
            "chars600",
            "adapt8",
            "adapt12",
            "adapt16",
            "adapt24",
            "nearby",
        ],
        help="what each turn carries (module docstring)",
    )
    parser.add_argument("--variants", nargs="*", default=[], help="searches (default: all)")
    args = parser.parse_args(argv)
    convs, _ = load_dataset(args.data)
    for mode in args.modes:
        run(convs, mode, args.variants)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
