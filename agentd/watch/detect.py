"""Change detection before any model call: normalised text, digests, numbers, new items.

All pure functions of their inputs; the caller runs them off the event loop (a page is up to
`max_source_bytes`, and a diff of two of them is CPU work).
"""

from __future__ import annotations

import difflib
import hashlib
import re

from agentd.watch.model import Change, Reading, Seen

MAX_SEEN_ITEMS = 500
MAX_DECIDED = 50
MAX_KEPT_TEXT = 20_000  # of the focused text, to diff against next time (journaled once)
# Line pairs a diff may weigh: difflib's alignment grows faster than the product of the two
# texts' line counts (3,000 x 3,000 short lines in another order: 0.25 s; 5,000 x 20,000:
# 15 s), and a page is up to `max_source_bytes`. Past it, `_changed_lines`.
MAX_DIFF_PAIRS = 10_000_000
_NUMBER = re.compile(r"[-−]?\d[\d,.' ]*\d|[-−]?\d")


def focused(text: str, focus: str) -> str:
    """The text as compared: lines trimmed, blank ones and runs of spaces gone, and only the
    lines holding one of the focus words (case-insensitive) when there are any. Plain words,
    not a pattern: nothing in the owner's focus can make a hostile page slow to scan."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    kept = [line for line in lines if line]
    words = [w.strip().casefold() for w in focus.split("|") if w.strip()]
    if words:
        kept = [line for line in kept if any(w in line.casefold() for w in words)]
    return "\n".join(kept)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def numbers(text: str, limit: int = 40) -> list[str]:
    return [m.group().strip() for m in _NUMBER.finditer(text)][:limit]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text_diff(old: str, new: str, limit: int) -> str:
    """The changed lines (unified, one line of context), cut to `limit` characters."""
    before, after = old.splitlines(), new.splitlines()
    if len(before) * len(after) > MAX_DIFF_PAIRS:
        return _changed_lines(before, after, limit)
    lines = difflib.unified_diff(before, after, lineterm="", n=1)
    body = [line for line in lines if not line.startswith(("---", "+++"))]
    return _cut("\n".join(body), limit)


def _changed_lines(before: list[str], after: list[str], limit: int) -> str:
    """Past MAX_DIFF_PAIRS: the lines gone and the lines new (each once, in its text's order),
    found with sets in linear time, half of `limit` for each; the output says it is not a
    line-by-line alignment, and says so when the lines only moved."""
    kept, now = set(before), set(after)
    gone = [f"-{line}" for line in dict.fromkeys(before) if line not in now]
    added = [f"+{line}" for line in dict.fromkeys(after) if line not in kept]
    if not gone and not added:
        return "(Too long to compare line by line: the same lines, in another order.)"
    head = "(Too long to compare line by line: the lines gone, then the lines new.)"
    parts = [head, _cut("\n".join(gone), limit // 2), _cut("\n".join(added), limit // 2)]
    return _cut("\n".join(part for part in parts if part), limit)


def _number_change(old: str, new: str) -> str:
    before, after = numbers(old), numbers(new)
    if before == after:
        return ""
    return f"Numbers before: {', '.join(before) or '—'}\nNumbers now: {', '.join(after) or '—'}"


def compare_text(
    seen: Seen | None, reading: Reading, focus: str, limit: int, *, at: float, memory: float
) -> Change:
    """`memory`: seconds a decided state stays decided (back to it sooner: no call, nothing
    told again); after that, the same state is news again (the price dropped again)."""
    now = focused(reading.text, focus)
    mark = digest(now)
    decided = {d: t for d, t in (seen.decided if seen else {}).items() if at - t < memory}
    new_seen = Seen(digest=mark, text=now[:MAX_KEPT_TEXT], decided=decided)
    if seen is not None and seen.digest == mark:
        return Change(kind="none", seen=new_seen)
    if mark in decided:
        return Change(kind="decided_before", seen=new_seen)
    if seen is None:  # the first read: the condition may hold already
        return Change(kind="changed", shown=f"Current content:\n{_cut(now, limit)}", seen=new_seen)
    parts = [f"What changed (- before, + now):\n{text_diff(seen.text, now, limit)}"]
    moved = _number_change(seen.text, now)
    if moved:
        parts.append(moved)
    return Change(kind="changed", shown=_cut("\n\n".join(parts), limit), seen=new_seen)


def compare_items(seen: Seen | None, reading: Reading, limit: int) -> Change:
    ids = list(reading.items)
    if seen is None:  # what is there at the start is not news (as the mail watcher does)
        return Change(kind="baseline", seen=Seen(items=ids[-MAX_SEEN_ITEMS:]))
    known = set(seen.items)
    fresh = [i for i in ids if i not in known]
    kept = [*seen.items, *fresh][-MAX_SEEN_ITEMS:]
    new_seen = Seen(items=kept)
    if not fresh:
        return Change(kind="none", seen=new_seen)
    lines = "\n".join(f"- {reading.items[i]}" for i in fresh)
    return Change(
        kind="changed", shown=_cut(f"New since the last check:\n{lines}", limit), seen=new_seen
    )


def decided(seen: Seen, at: float) -> Seen:
    """`seen`, remembering its state as decided at `at` (text sources; items are told once by
    id, so they need no such memory)."""
    if not seen.digest:
        return seen
    kept = sorted({**seen.decided, seen.digest: at}.items(), key=lambda kv: kv[1])
    return seen.model_copy(update={"decided": dict(kept[-MAX_DECIDED:])})
