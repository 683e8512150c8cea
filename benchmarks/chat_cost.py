"""What a 20-turn chat costs per model configuration: Claude only, and Claude with the
background summaries on a local model (an OpenAI-compatible server, priced at 0).

One chat runs through `agentd run` (a subprocess, tests/daemon_process.py) against the local
Telegram and Anthropic fakes: LoCoMo lines (/work/shared/data/locomo-dev.json) sent back to
back, answers of assistant length, summaries made as the chat goes (memory.summary_threshold
lowered to --threshold so a 20-turn chat has some; the default, 60 messages, starts them after
30 turns). Every model call's tokens are read from `llm_usage`, per purpose, as the fake's
prompt cache counted them (tests/fakes/anthropic_cache.py, Haiku 4.5's 4,096-token minimum).

The configurations are priced from that one run's recorded usage: "Claude only" at Haiku 4.5's
list prices for every call; "summaries local" moves the summary calls to a local model
(`[llm.models] summary = "local/…"`), which costs 0 (agentd/llm/pricing.py), and keeps the
turns' calls as they were. A local model tokenises differently; the arithmetic keeps Claude's
counts, which is what matters for the price of the calls that stay on Claude.

Usage: .venv/bin/python benchmarks/chat_cost.py [--turns 20] [--threshold 16]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.config.models import ModelSettings, ProviderConfig
from agentd.ledger.pricing import Tokens, cost, price_for
from agentd.llm.pricing import provider_prices
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

LOCOMO = Path("/work/shared/data/locomo-dev.json")
SUMMARY = {"summary": "The user talked about their week.", "facts": [], "retract_keys": []}
FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def chat_lines(count: int) -> list[str]:
    lines: list[str] = []
    for sample in json.loads(LOCOMO.read_text()):
        conv = sample["conversation"]
        for key in sorted(
            (k for k in conv if k.startswith("session_") and k[8:].isdigit()),
            key=lambda k: int(k[8:]),
        ):
            lines += [t["text"] for t in conv[key] if len(t.get("text", "").split()) >= 4]
    return lines[: count * 6]


def answer(lines: list[str]) -> Any:
    def respond(body: dict[str, Any]) -> Any:
        choice = (body.get("tool_choice") or {}).get("name")
        if choice:  # the summariser's forced tool call
            return [{"type": "tool_use", "id": "toolu_sum", "name": choice, "input": SUMMARY}]
        n = len(body["messages"])
        return " ".join(lines[n % (len(lines) - 6) : n % (len(lines) - 6) + 5])

    return respond


def run(turns: int, threshold: int, tmp: Path) -> list[tuple[str, str, int, int, int, int, int]]:
    lines = chat_lines(turns)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(answer(lines))
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
            AGENTD_MEMORY__SUMMARY_THRESHOLD=str(threshold),
            AGENTD_MEMORY__SUMMARY_KEEP_RECENT=str(threshold // 2),
        )
        daemon = Daemon(tmp, env).start(timeout=120)
        try:
            for n in range(1, turns + 1):
                tg.add_message(OWNER, OWNER, lines[n * 5])
                tg.wait_for_sent(n, timeout=60, chat_id=OWNER)
            deadline = time.monotonic() + 60  # summaries run in the background: let them end
            while (
                time.monotonic() < deadline
                and daemon.query(
                    "SELECT COUNT(*) FROM workflow_instances WHERE status IN ('queued','running')"
                )[0][0]
            ):
                time.sleep(0.1)
            rows = daemon.query(
                "SELECT purpose, model, COUNT(*), SUM(input_tokens), SUM(output_tokens), "
                "SUM(cache_read_tokens), SUM(cache_write_tokens) FROM llm_usage "
                "GROUP BY purpose, model ORDER BY purpose"
            )
        finally:
            daemon.stop()
    return [tuple(r) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--threshold", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentd-chat-cost-") as tmp:
        rows = run(args.turns, args.threshold, Path(tmp))
    local = ModelSettings(providers={"local": ProviderConfig(local=True)})
    prices = provider_prices(local)
    claude_only = summaries_local = 0.0
    print(f"{args.turns}-turn chat, summaries past {args.threshold} messages; recorded usage:")
    for purpose, model, calls, *counts in rows:
        tokens = Tokens(**dict(zip(FIELDS, counts, strict=True)))
        on_claude = cost(tokens, price_for(model))
        moved = purpose == "summary"
        local_label = "local/qwen2.5:7b" if moved else model
        claude_only += on_claude
        summaries_local += cost(tokens, price_for(local_label, prices))
        print(
            f"  {purpose:<8} {calls:>3} calls  input {tokens.input_tokens:>7,}  cache read "
            f"{tokens.cache_read_tokens:>7,}  cache write {tokens.cache_write_tokens:>6,}  "
            f"output {tokens.output_tokens:>6,}  ${on_claude:.4f} on {model}"
        )
    print(f"Claude only (claude-haiku-4-5 for everything): ${claude_only:.4f}")
    print(
        f"summaries on a local model (0 per token):      ${summaries_local:.4f} "
        f"({(1 - summaries_local / claude_only) if claude_only else 0:.1%} less)"
    )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
