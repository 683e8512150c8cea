"""A messaging-app rendering of LoCoMo conversations: SYNTHETIC noise on real labels.

    python benchmarks/noisy_chat.py --data locomo10_v2/ --out /tmp/locomo-noisy.json [--seed 1]

LoCoMo's turns are tidy paragraphs; what owners write in a chat app is not always so. This
script rewrites LoCoMo the way such chats can differ from it, deterministically (seeded per
conversation), and keeps the labels. It is a stand-in, not real chat: figures on it say how
retrieval copes with these particular kinds of noise, nothing more. Choices made on it did not
hold on REALTALK's real chats, whose people mostly write whole sentences (benchmarks/README.md):
measure on real chat (`memory_retrieval.py` reads REALTALK) before keeping anything chosen here.

What changes, per conversation (each speaker gets a style of their own):

- **split thoughts**: a turn becomes one message per sentence, long sentences cut again at a
  ", and"/", but"/", so"/" - " (at most five messages a turn); each message is its own turn
  with its own id (`D<session>:<n>`, renumbered);
- **reactions**: now and then the other speaker answers a message with "lol", "omg", "haha
  true", an emoji… (no content, a distractor);
- **nicknames**: each speaker's name, where the other writes it, becomes a nickname most of
  the time ("Caroline" → "caro"); the display name (the speaker label) and the questions keep
  the full name, as in a chat app;
- **casual spelling**: lower case for one speaker most of the time, no final full stop, chat
  abbreviations (you → u, because → bc, tomorrow → tmrw, …), and typos (a dropped, doubled,
  swapped or neighbouring-key letter) in about one word of twenty-five;
- **labels**: an evidence turn's label moves to the messages it was split into that hold a
  word of the answer; to all of them when none does (then one answer needs several turns).

Questions, answers, categories, session dates and photo captions are LoCoMo's.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.retrieval.fts import STOPWORDS
from benchmarks.memory_retrieval import _SESSION, _entries, parse_evidence

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
_CUT = re.compile(r",\s+(?=(?:and|but|so|because|which)\b)|\s+-\s+")
_WORD = re.compile(r"[A-Za-z]+")
ABBREVIATIONS = {
    "you": "u",
    "your": "ur",
    "you're": "ur",
    "because": "bc",
    "tomorrow": "tmrw",
    "tonight": "tonite",
    "really": "rly",
    "though": "tho",
    "thanks": "thx",
    "please": "pls",
    "people": "ppl",
    "probably": "prob",
    "okay": "ok",
    "going to": "gonna",
    "want to": "wanna",
    "got to": "gotta",
    "I don't know": "idk",
    "to be honest": "tbh",
    "by the way": "btw",
    "at the moment": "atm",
    "see you": "cya",
    "oh my god": "omg",
}
REACTIONS = ("lol", "omg", "haha true", "yesss", "nice!!", "wait really?", "aww", "😂", "❤️", "ikr")
KEYBOARD = "qwertyuiop asdfghjkl zxcvbnm"


class Style:
    """How one speaker writes."""

    def __init__(self, rng: random.Random) -> None:
        self.lower = rng.choice((0.15, 0.5, 0.85))  # share of messages in lower case
        self.abbreviate = rng.choice((0.2, 0.5, 0.8))
        self.typo = rng.choice((0.02, 0.04, 0.06))  # per word of 4+ letters
        self.split = rng.choice((0.5, 0.8))  # chance a long sentence is cut again


def nickname(name: str, rng: random.Random) -> str:
    """A short form of a first name: "Caroline" → "caro", "Melanie" → "mel" or "mels"."""
    stem = name[: rng.choice((3, 4))] if len(name) > 4 else name
    return (stem + rng.choice(("", "", "s", "y"))).lower()


def typo(word: str, rng: random.Random) -> str:
    i = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(4)
    if kind == 0:
        return word[:i] + word[i + 1 :]  # dropped
    if kind == 1:
        return word[:i] + word[i] + word[i:]  # doubled
    if kind == 2:
        return word[: i - 1] + word[i] + word[i - 1] + word[i + 1 :]  # swapped
    row = next((r for r in KEYBOARD.split() if word[i].lower() in r), None)
    if row is None:
        return word
    j = row.index(word[i].lower())
    near = row[max(0, j - 1)] if rng.random() < 0.5 else row[min(len(row) - 1, j + 1)]
    return word[:i] + near + word[i + 1 :]  # neighbouring key


def pieces(text: str, style: Style, rng: random.Random) -> list[str]:
    """One turn as the short messages a chat app would carry (at most five)."""
    out: list[str] = []
    for sentence in _SENTENCE.split(text.strip()):
        if len(sentence) > 60 and rng.random() < style.split:
            out.extend(p for p in _CUT.split(sentence) if p.strip())
        else:
            out.append(sentence)
    if len(out) > 5:
        out = [*out[:4], " ".join(out[4:])]
    return [p.strip() for p in out if p.strip()]


def casual(text: str, style: Style, names: dict[str, str], rng: random.Random) -> str:
    """A message as this speaker types it."""
    for full, nick in names.items():
        text = re.sub(
            rf"\b{re.escape(full)}\b",
            lambda m, n=nick: n if rng.random() < 0.8 else m.group(0),
            text,
        )
    for long, short in ABBREVIATIONS.items():
        text = re.sub(
            rf"\b{re.escape(long)}\b",
            lambda m, s=short: s if rng.random() < style.abbreviate else m.group(0),
            text,
            flags=re.IGNORECASE,
        )
    text = _WORD.sub(
        lambda m: (
            typo(m.group(0), rng)
            if len(m.group(0)) >= 4 and rng.random() < style.typo
            else m.group(0)
        ),
        text,
    )
    if rng.random() < style.lower:
        text = text.lower()
    if text.endswith(".") and not text.endswith("..") and rng.random() < 0.8:
        text = text[:-1]
    return text


def _answer_words(answer: Any) -> set[str]:
    words = {w.lower() for w in _WORD.findall(str(answer)) if len(w) >= 3}
    return words - STOPWORDS


def _holds(piece: str, wanted: set[str]) -> bool:
    have = {w.lower() for w in _WORD.findall(piece)}
    # "painting" answers "paint": a shared stem of five letters counts.
    return any(w in have or any(h[:5] == w[:5] for h in have if len(h) >= 5) for w in wanted)


def rewrite(entry: dict[str, Any], seed: int) -> dict[str, Any]:
    """One LoCoMo conversation (either layout) in the messaging-app rendering."""
    conv = entry.get("conversation", entry)
    sample_id = str(entry.get("sample_id") or "conv")
    rng = random.Random(seed * 1_000_003 + zlib.crc32(sample_id.encode()))
    speakers = [conv.get("speaker_a"), conv.get("speaker_b")]
    speakers = [s for s in speakers if isinstance(s, str) and s]
    styles = {s: Style(rng) for s in speakers}
    nicks = {s: nickname(s.split()[0], rng) for s in speakers}
    out_conv: dict[str, Any] = {
        k: v for k, v in conv.items() if k.startswith("speaker_") or k.endswith("_date_time")
    }
    moved: dict[str, list[tuple[str, str]]] = {}  # old id → [(new id, clean text)]
    for key, session in conv.items():
        m = _SESSION.match(key)
        if m is None or not isinstance(session, list):
            continue
        number, messages = m.group(1), []
        for turn in session:
            if not isinstance(turn, dict) or not isinstance(turn.get("text"), str):
                continue
            who = turn.get("speaker", "")
            style = styles.get(who) or Style(rng)
            others = {full: nick for full, nick in nicks.items() if full != who}
            for i, piece in enumerate(pieces(turn["text"], style, rng)):
                new_id = f"D{number}:{len(messages) + 1}"
                message = {
                    "speaker": who,
                    "dia_id": new_id,
                    "text": casual(piece, style, others, rng),
                }
                if i == 0 and turn.get("blip_caption"):
                    message["blip_caption"] = turn["blip_caption"]
                messages.append(message)
                moved.setdefault(str(turn.get("dia_id")), []).append((new_id, piece))
            listener = next((s for s in speakers if s != who), None)
            if listener and rng.random() < 0.12:
                reaction = {"speaker": listener, "dia_id": f"D{number}:{len(messages) + 1}"}
                messages.append({**reaction, "text": rng.choice(REACTIONS)})
        out_conv[key] = messages
    qa = [_relabel(item, moved) for item in entry.get("qa") or [] if isinstance(item, dict)]
    return {"sample_id": sample_id, "conversation": out_conv, "qa": qa}


def _relabel(item: dict[str, Any], moved: dict[str, list[tuple[str, str]]]) -> dict[str, Any]:
    wanted = _answer_words(item.get("answer", item.get("adversarial_answer", "")))
    evidence: list[str] = []
    for old in parse_evidence(item.get("evidence")):
        split = moved.get(old, [])
        holding = [new for new, text in split if wanted and _holds(text, wanted)]
        evidence.extend(holding or [new for new, _ in split])
    return {**item, "evidence": evidence}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="LoCoMo file or directory (either layout)")
    parser.add_argument("--out", required=True, help="where to write the rendering (JSON)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    out = []
    for entry, stem in _entries(Path(args.data)):
        if isinstance(entry, dict):
            entry = {**entry, "sample_id": entry.get("sample_id") or f"conv-{stem}"}
            out.append(rewrite(entry, args.seed))
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=0), encoding="utf-8")
    turns = sum(len(v) for c in out for k, v in c["conversation"].items() if _SESSION.match(k))
    print(f"wrote {args.out}: {len(out)} conversations, {turns} messages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
