"""Long answers in chunks that each fit one message, on any channel (the channel says what
fits: Telegram counts UTF-16 units of text and HTML, Matrix the event's bytes)."""

from __future__ import annotations

import re
from collections.abc import Callable

from agentd.chat.format import blocks


def _pieces(markdown: str) -> list[str]:
    """Paragraphs and whole code blocks: the units a split prefers to keep together."""
    pieces: list[str] = []
    for kind, lang, body in blocks(markdown):
        if kind == "code":
            pieces.append(f"```{lang}\n{body}\n```")
        else:
            pieces.extend(p for p in re.split(r"\n\s*\n", body) if p.strip())
    return pieces


def _hard_cut(text: str, fits: Callable[[str], bool]) -> list[str]:
    """Cut text with no usable separator into the longest pieces that fit (binary search)."""
    parts = []
    while text:
        low, high = 1, len(text)
        while low < high:
            mid = (low + high + 1) // 2
            if fits(text[:mid]):
                low = mid
            else:
                high = mid - 1
        parts.append(text[:low])
        text = text[low:]
    return parts


def _split_oversized(piece: str, fits: Callable[[str], bool]) -> list[str]:
    """Split one paragraph or code block that is too long on its own: lines, words, characters."""
    code = re.match(r"```([\w+-]*)\n(.*)\n```$", piece, re.DOTALL)
    if code:
        lang = code[1]
        inner = _split_units(code[2].split("\n"), "\n", lambda t: fits(f"```{lang}\n{t}\n```"))
        return [f"```{lang}\n{part}\n```" for part in inner]
    for separator in ("\n", " "):
        units = piece.split(separator)
        if len(units) > 1:
            return _split_units(units, separator, fits)
    return _hard_cut(piece, fits)


def _split_units(units: list[str], sep: str, fits: Callable[[str], bool]) -> list[str]:
    return _pack(units, sep, fits, lambda unit: _hard_cut(unit, fits))


def _longest_run(units: list[str], start: int, sep: str, fits: Callable[[str], bool]) -> int:
    """The end of the longest run of units from `start` that fits joined (units[start] alone
    does): doubling, then halving, so a chunk costs a few renders, not one per unit."""
    good, step = start + 1, 1
    bad = len(units) + 1
    while good + step < bad:
        if fits(sep.join(units[start : good + step])):
            good += step
            step *= 2
        else:
            bad = good + step
            break
    while good + 1 < bad:
        mid = (good + bad) // 2
        if fits(sep.join(units[start:mid])):
            good = mid
        else:
            bad = mid
    return good


def _pack(
    units: list[str],
    sep: str,
    fits: Callable[[str], bool],
    oversized: Callable[[str], list[str]],
) -> list[str]:
    """Units joined by `sep` into the fewest chunks that fit, in order; a unit too long on
    its own is split by `oversized`."""
    parts: list[str] = []
    i = 0
    while i < len(units):
        if not fits(units[i]):
            parts.extend(oversized(units[i]))
            i += 1
            continue
        end = _longest_run(units, i, sep, fits)
        parts.append(sep.join(units[i:end]))
        i = end
    return parts


def split_markdown(markdown: str, fits: Callable[[str], bool]) -> list[str]:
    """Split an answer into ordered chunks that each `fits` one message: whole paragraphs
    where they fit, else lines, words, characters; a code block cut is closed and reopened,
    so every chunk renders on its own."""
    if not markdown.strip():
        return []
    return _pack(_pieces(markdown), "\n\n", fits, lambda piece: _split_oversized(piece, fits))
