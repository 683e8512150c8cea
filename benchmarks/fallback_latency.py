"""How long an answer takes when the primary model fails: from the request to the fallback's
answer, through the official SDKs against the local fakes, with agentd's retry policy as
configured by default ([llm] retry_base_delay = 1 s, retries = 4; [llm.breaker] failures = 2,
retries_before_fallback = 1).

Claude on the fake Messages API answers every request with 529 overloaded (an overload storm);
the fallback is a local model on the fake Chat Completions server. Per turn, in order:
- turns 1-2: the primary is tried (twice each: one retry), then the fallback answers;
- turns 3+: the breaker is open, the fallback answers at once;
- "no fallback": the same storm with one model only, which fails after its 5 attempts.
The fakes answer instantly, so the figures are the policy's waits plus the client's own cost.

Usage: .venv/bin/python benchmarks/fallback_latency.py [--turns 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import SecretStr

from agentd.config import Config, LLMConfig
from agentd.config.models import ModelSettings, ProviderConfig
from agentd.llm.factory import build
from agentd.llm.types import LLMError, LLMRequest, Message
from tests.fakes import FakeAnthropic
from tests.fakes.anthropic import ErrorReply
from tests.fakes.openai_chat import FakeChat

ASK = LLMRequest(messages=[Message(role="user", content="hello")])


def _overloaded(_body: dict[str, Any]) -> ErrorReply:
    return ErrorReply(529, "overloaded_error", "Overloaded")


def _config(claude: FakeAnthropic) -> Config:
    config = Config(llm=LLMConfig(base_url=claude.base_url))
    config.secrets.anthropic_api_key = SecretStr("sk-ant-bench")
    return config


async def storm(claude: FakeAnthropic, chat: FakeChat, turns: int) -> list[tuple[float, str]]:
    local = ProviderConfig(kind="openai", base_url=chat.base_url + "/v1", local=True)
    settings = ModelSettings(fallbacks=["local/qwen2.5:7b"], providers={"local": local})
    llm = build(_config(claude), settings)
    out = []
    try:
        for _ in range(turns):
            t0 = time.perf_counter()
            answer = await llm.complete(ASK)
            out.append((time.perf_counter() - t0, answer.fallback_reason or ""))
    finally:
        await llm.close()
    return out


async def alone(claude: FakeAnthropic) -> float:
    llm = build(_config(claude), ModelSettings())
    t0 = time.perf_counter()
    try:
        await llm.complete(ASK)
    except LLMError:
        pass
    finally:
        await llm.close()
    return time.perf_counter() - t0


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=10, help="3 or more (2 open the breaker)")
    args = ap.parse_args()
    if args.turns < 3:
        ap.error("--turns must be 3 or more: turns 1-2 open the breaker, the median is of the rest")
    print(f"fallback latency — nproc {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    with FakeAnthropic.running() as claude, FakeChat.running() as chat:
        claude.set_responder(_overloaded)
        await storm(claude, chat, 1)  # both SDKs imported and warm before timing
        claude.reset()
        claude.set_responder(_overloaded)
        times = await storm(claude, chat, args.turns)
        calls = len(claude.requests)
        claude.reset()
        claude.set_responder(_overloaded)
        failed = await alone(claude)
    for n, (seconds, why) in enumerate(times, start=1):
        print(f"  turn {n:>2}: fallback answered in {seconds * 1000:8.1f} ms  ({why})")
    rest = [s for s, _ in times[2:]]
    print(
        f"primary tried {calls} times in {args.turns} turns; breaker open after turn 2: "
        f"median {statistics.median(rest) * 1000:.1f} ms per answer"
    )
    print(f"no fallback: the turn fails after {failed:.1f} s of retries")


if __name__ == "__main__":
    asyncio.run(main())
