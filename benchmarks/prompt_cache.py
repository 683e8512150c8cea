"""Prompt caching over a long chat (R-LLM-4): how much input is read from the cache, and cost.

One 100-turn private chat runs through `agentd run` (a subprocess, tests/daemon_process.py)
against the local Telegram and Anthropic fakes, with the default config: long-term memory and
recall on (hashing embedder, background summaries), the built-in tools on. Once with this tree,
once with agentd as it was before the cache layout (`--baseline-ref`, exported with
`git archive` and run from a temporary directory). The 20-turn figures are the first 20 turns
of the same run (a daemon behaves the same for them whatever follows).

The user's messages are real chat lines from LoCoMo (/work/shared/data/locomo-dev.json, one
speaker); each answer is the next 4-9 lines of the same conversation joined (real text, about
assistant length: 60-250 words). Every fifth turn the model first calls `current_time` (a
tool loop: two model calls). Gaps between turns are drawn (seeded) from a personal-chat mix:
60 % 0.5-4 min, 25 % 5-40 min, 15 % 1-8 h; the fake's cache clock is moved on by the gap
instead of waiting (tests/fakes/anthropic_cache.py, `advance`), and the stored messages' times
are moved back by it, so the daemon sees the pause as it would have happened.

The fake records each request body. The cache accounting is deterministic given the bodies
and their times, so the bodies are replayed through the fake's PromptCache for each minimum
cacheable length (1,024 / 2,048 / 4,096 tokens) and TTL (5 min, and 1 h by rewriting the
markers), instead of running the daemon once per combination. Only the turn's own model calls
count (summaries are background work with their own prompt). This tree runs once per minimum,
configured with a model that has it (its history window keeps enough to reach the minimum);
costs use Haiku 4.5's list prices for every minimum, so the columns compare layouts, not models.

"ceiling" is the share of input tokens that any cache could have served: per call, the
longest block-aligned prefix that an earlier call of the chat also sent, if it reaches the
minimum (unlimited breakpoints, entries that never expire).

Usage: .venv/bin/python benchmarks/prompt_cache.py [--turns 100] [--baseline-ref 8b82d9d]
       [--seed 7] [--skip-baseline]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.ledger.pricing import Tokens, cost, price_for, uncached_cost
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import estimate_tokens
from tests.fakes.anthropic_cache import PromptCache, prefixes

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = Path("/work/shared/data/locomo-dev.json")
# A model per minimum cacheable length (agentd/ledger/pricing.py), so this tree's history window is
# shaped as it would be for such a model; every row is priced at Haiku 4.5's rates.
MODELS = {1024: "claude-sonnet-4-5", 2048: "claude-sonnet-4-6", 4096: "claude-haiku-4-5"}
MINIMUMS = tuple(MODELS)
SUMMARY = {"summary": "The user talked about their week.", "facts": [], "retract_keys": []}


def chat_lines(path: Path) -> list[str]:
    """Every line of every LoCoMo conversation, in order."""
    lines = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        sessions = sorted(
            (k for k in conv if k.startswith("session_") and k.split("_")[-1].isdigit()),
            key=lambda k: int(k.split("_")[1]),
        )
        lines += [turn["text"] for s in sessions for turn in conv[s] if turn.get("text")]
    return lines


def gaps(n: int, rng: random.Random) -> list[float]:
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.60:
            out.append(rng.uniform(30, 240))
        elif r < 0.85:
            out.append(rng.uniform(300, 2400))
        else:
            out.append(rng.uniform(3600, 8 * 3600))
    return out


def make_responder(lines: list[str], outputs: list[int]) -> Any:
    """Answers like a model would; `outputs` gets each answer's output tokens, in call order."""

    def respond(body: dict[str, Any]) -> Any:
        answer = _answer(body, lines)
        outputs.append(estimate_tokens(answer))
        return answer

    return respond


def _user_text(body: dict[str, Any]) -> str:
    """The newest text the user wrote (not agentd's context block, not tool results)."""
    for message in reversed(body["messages"]):
        content = message["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        texts = [
            b["text"]
            for b in blocks
            if b.get("type") == "text" and not b["text"].startswith("<context>")
        ]
        if message["role"] == "user" and texts:
            return texts[0]
    return ""


def _answer(body: dict[str, Any], lines: list[str]) -> Any:
    choice = (body.get("tool_choice") or {}).get("name")
    if choice:  # the summariser's forced tool call
        return [{"type": "tool_use", "id": "toolu_sum", "name": choice, "input": SUMMARY}]
    last = body["messages"][-1]["content"]
    looping = isinstance(last, list) and any(b.get("type") == "tool_result" for b in last)
    text = _user_text(body)
    seed = int(hashlib.sha256(text.encode()).hexdigest(), 16)  # the same answer in both runs
    if "[tool]" in text and not looping:
        return [
            {
                "type": "tool_use",
                "id": f"toolu_{seed % 10**12}",
                "name": "current_time",
                "input": {},
            }
        ]
    start = seed % (len(lines) - 10)
    return " ".join(lines[start : start + 4 + seed % 6])


# agentd before the cache layout: the tree the figure compares against.
BASELINE_REF = "8b82d9d"


def baseline_env(env: dict[str, str]) -> dict[str, str]:
    """The harness's environment in the baseline tree's keys: that tree rejects unknown keys,
    has no [retention], and reads the owner's ids from [telegram], not [access]."""
    env = dict(env)
    env.pop("AGENTD_RETENTION__ENABLED", None)
    owners = env.pop("AGENTD_ACCESS__ALLOWED_USER_IDS", None)
    if owners is not None:
        env["AGENTD_TELEGRAM__ALLOWED_USER_IDS"] = owners
    return env


def run_chat(
    agentd_path: Path | None, turns: list[str], pauses: list[float], tmp: Path, **env_extra: str
) -> Any:
    """Drive one chat through `agentd run`; return [(request body, cache time)] of turn calls."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        outputs: list[int] = []
        llm.set_responder(make_responder(chat_lines(LOCOMO), outputs))
        pythonpath = f"{agentd_path}:{ROOT}" if agentd_path else str(ROOT)
        # The chat's pauses are simulated, so the per-minute rate limit would see a burst.
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            PYTHONPATH=pythonpath,
            AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
            **env_extra,
        )
        if agentd_path:
            env = baseline_env(env)
        daemon = Daemon(tmp, env).start(timeout=120)
        offsets: list[tuple[int, float]] = []  # (first request index of the turn, clock offset)
        offset = 0.0
        try:
            for n, (text, pause) in enumerate(zip(turns, pauses, strict=True), start=1):
                offsets.append((len(llm.requests), offset))
                tg.add_message(OWNER, OWNER, text)
                tg.wait_for_sent(n, timeout=120, chat_id=OWNER)
                deadline = time.time() + 60
                while (
                    daemon.query("SELECT COUNT(*) FROM messages WHERE role = 'assistant'")[0][0] < n
                    and time.time() < deadline
                ):
                    time.sleep(0.02)
                llm.cache.advance(pause)
                daemon.age_messages(pause)  # the daemon sees the pause in the chat's timestamps
                offset += pause
        except TimeoutError:
            print(daemon.log()[-4000:], file=sys.stderr)
            raise
        finally:
            daemon.stop()
        requests = llm.requests
    calls = []
    for i, request in enumerate(requests):
        if request["body"].get("tool_choice"):
            continue  # background summary
        turn = max(k for k, (first, _) in enumerate(offsets) if first <= i)
        at = request["time"] + offsets[turn][1]
        calls.append((turn, request["body"], at, outputs[i]))
    return calls


def with_ttl(body: dict[str, Any], ttl: str) -> dict[str, Any]:
    """The body with every breakpoint at this TTL ("mix": 1 h on tools and system, 5 min on
    the history). For 1 h, a breakpoint the tree sent with an explicit 5 min TTL (the tool
    loop's) keeps it."""
    body = copy.deepcopy(body)

    def mark(block: Any, chosen: str) -> None:
        if isinstance(block, dict) and "cache_control" in block:
            if chosen == "1h" and block["cache_control"].get("ttl") == "5m":
                return
            block["cache_control"] = {"type": "ephemeral", "ttl": chosen}

    for block in [*(body.get("tools") or []), *(body.get("system") or [])]:
        mark(block, "1h" if ttl == "mix" else ttl)
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            mark(block, "5m" if ttl == "mix" else ttl)
    return body


def replay(calls: list[Any], minimum: int, ttl: str = "5m") -> Tokens:
    now = [0.0]
    cache = PromptCache(min_tokens=minimum, clock=lambda: now[0])
    total = Tokens()
    for _, body, at, output in calls:
        now[0] = at
        u = cache.usage(with_ttl(body, ttl))
        total.input_tokens += u["input_tokens"]
        total.cache_read_tokens += u["cache_read_input_tokens"]
        total.cache_write_tokens += u["cache_creation_input_tokens"]
        total.cache_write_1h_tokens += u["cache_creation"]["ephemeral_1h_input_tokens"]
        total.output_tokens += output
    return total


def ceiling(calls: list[Any], minimum: int) -> float:
    seen: set[str] = set()
    cacheable = total = 0
    for _, body, _, _ in calls:
        hashes, totals = prefixes(body)
        reusable = [t for h, t in zip(hashes, totals, strict=True) if h in seen and t >= minimum]
        seen.update(hashes)
        cacheable += max(reusable, default=0)
        total += totals[-1] if totals else 0
    return cacheable / total if total else 0.0


def share(t: Tokens) -> float:
    whole = t.input_tokens + t.cache_read_tokens + t.cache_write_tokens
    return t.cache_read_tokens / whole if whole else 0.0


def export(ref: str, dest: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "agentd"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument(
        "--history-step",
        type=int,
        default=None,
        help="memory.history_step for this tree (default: the config default)",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    lines = [line for line in chat_lines(LOCOMO) if len(line.split()) >= 4]
    start = rng.randrange(len(lines) - args.turns)
    turns = [
        f"{line} [tool]" if n % 5 == 2 else line
        for n, line in enumerate(lines[start : start + args.turns])
    ]
    pauses = gaps(args.turns, rng)
    price = price_for("claude-haiku-4-5")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="agentd-cache-bench-") as tmp:
        started = time.time()
        step = {"AGENTD_MEMORY__HISTORY_STEP": str(args.history_step)} if args.history_step else {}
        for minimum, model in MODELS.items():  # this tree shapes its window for the model
            (Path(tmp) / f"new-{minimum}").mkdir()
            runs[("new", minimum)] = run_chat(
                None, turns, pauses, Path(tmp) / f"new-{minimum}", AGENTD_LLM__MODEL=model, **step
            )
        print(
            f"# this tree: {len(runs[('new', 4096)])} turn calls per model, "
            f"{time.time() - started:.0f} s for {len(MODELS)} runs"
        )
        if not args.skip_baseline:
            started = time.time()
            (Path(tmp) / "old").mkdir()
            old_code = export(args.baseline_ref, Path(tmp) / "old")
            runs["old"] = run_chat(old_code, turns, pauses, Path(tmp) / "old")
            print(
                f"# before ({args.baseline_ref}): {len(runs['old'])} turn calls in "
                f"{time.time() - started:.0f} s"
            )
    print(
        f"# gaps: median {sorted(pauses)[len(pauses) // 2] / 60:.1f} min, "
        f"{sum(p > 300 for p in pauses)} of {len(pauses)} over 5 min, "
        f"{sum(p > 3600 for p in pauses)} over 1 h"
    )
    header = (
        "chat",
        "min",
        "layout",
        "ttl",
        "read share",
        "ceiling",
        "$/turn",
        "vs before",
        "vs no cache",
        "tokens/turn: plain / read / write / out",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for length in sorted({20, args.turns}):
        for minimum in MINIMUMS:
            variants = [("new", "5m"), ("new", "1h"), ("new", "mix")]
            # The old tree at 5 min (8b82d9d's default) is the "before"; at 1 h for a newer ref.
            variants += [("old", "5m"), ("old", "1h")] if "old" in runs else []
            results = {}
            for layout, ttl in variants:
                run = runs[(layout, minimum)] if layout == "new" else runs[layout]
                calls = [c for c in run if c[0] < length]
                t = replay(calls, minimum, ttl)
                results[(layout, ttl)] = (
                    t,
                    ceiling(calls, minimum),
                    cost(t, price) / length,
                    uncached_cost(t, price) / length,
                )
            before = results.get(("old", "5m"))
            for (layout, ttl), (t, ceil, per_turn, plain) in results.items():
                vs_before = f"{per_turn / before[2]:.2f}×" if before else "-"
                cells = [
                    length,
                    minimum,
                    layout,
                    ttl,
                    f"{share(t):.1%}",
                    f"{ceil:.1%}",
                    f"{per_turn * 100:.3f}¢",
                    vs_before,
                    f"{per_turn / plain:.2f}×",
                    " / ".join(
                        str(round(n / length))
                        for n in (
                            t.input_tokens,
                            t.cache_read_tokens,
                            t.cache_write_tokens,
                            t.output_tokens,
                        )
                    ),
                ]
                print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main()
