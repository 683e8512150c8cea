"""Prompt caching (R-LLM-4): the fake's documented cache rules, agentd's layout, the pricing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from agentd.agent.prompt import build_context, build_system, with_breakpoints
from agentd.agent.window import Past, WindowRule, window_start
from agentd.config import LLMConfig
from agentd.ledger.pricing import ModelPrice, Tokens, cache_minimum, cost, price_for, uncached_cost
from agentd.ledger.usage import UsageTotals, report
from agentd.llm.anthropic_adapter import AnthropicLLM, build_params
from agentd.llm.types import LLMRequest, Message
from tests.fakes import FakeAnthropic
from tests.fakes.anthropic_cache import PromptCache, breakpoint_problem

BIG = "word " * 5000  # about 6,250 tokens: over every model's minimum
MARK = {"type": "ephemeral"}


def body(
    *texts: str,
    marks: tuple[int, ...] = (),
    model: str = "claude-sonnet-4-5",
    ttl: str | None = None,
) -> dict[str, Any]:
    """One user message per text; `marks` are the indexes of the messages carrying a breakpoint."""
    marker = MARK | ({"ttl": ttl} if ttl else {})
    messages = []
    for i, text in enumerate(texts):
        block: dict[str, Any] = {"type": "text", "text": text}
        if i in marks:
            block["cache_control"] = marker
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": [block]})
    return {"model": model, "max_tokens": 10, "messages": messages}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(clock: Clock) -> PromptCache:
    return PromptCache(clock=clock)


def test_a_prefix_is_written_once_then_read(cache: PromptCache) -> None:
    first = cache.usage(body(BIG, "q1", marks=(0,)))
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 6000
    second = cache.usage(body(BIG, "q2", marks=(0,)))
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0 and second["input_tokens"] < 10


def test_below_the_model_minimum_nothing_is_cached_or_charged(cache: PromptCache) -> None:
    text = "word " * 2000  # about 2,500 tokens: over Sonnet 4.5's 1,024, under Haiku 4.5's 4,096
    for _ in range(2):
        haiku = cache.usage(body(text, "q", marks=(0,), model="claude-haiku-4-5"))
        assert haiku["cache_creation_input_tokens"] == 0 == haiku["cache_read_input_tokens"]
    cache.usage(body(text, "q", marks=(0,), model="claude-sonnet-4-5"))
    again = cache.usage(body(text, "q", marks=(0,), model="claude-sonnet-4-5"))
    assert again["cache_read_input_tokens"] > 2000
    assert (
        PromptCache(min_tokens=10).usage(body("a b c " * 20, marks=(0,)))[
            "cache_creation_input_tokens"
        ]
        > 0
    )


def test_entries_expire_after_their_ttl_and_a_hit_refreshes_them(
    cache: PromptCache, clock: Clock
) -> None:
    cache.usage(body(BIG, marks=(0,)))
    clock.t += 250
    assert cache.usage(body(BIG, marks=(0,)))["cache_read_input_tokens"] > 0  # refreshed
    clock.t += 250  # 500 s after the write, 250 s after the refresh
    assert cache.usage(body(BIG, marks=(0,)))["cache_read_input_tokens"] > 0
    clock.t += 301
    expired = cache.usage(body(BIG, marks=(0,)))
    assert expired["cache_read_input_tokens"] == 0 and expired["cache_creation_input_tokens"] > 0


def test_the_one_hour_ttl_outlives_a_pause_and_is_reported_apart(
    cache: PromptCache, clock: Clock
) -> None:
    first = cache.usage(body(BIG, marks=(0,), ttl="1h"))
    assert first["cache_creation"] == {
        "ephemeral_5m_input_tokens": 0,
        "ephemeral_1h_input_tokens": first["cache_creation_input_tokens"],
    }
    clock.t += 3000
    assert cache.usage(body(BIG, marks=(0,), ttl="1h"))["cache_read_input_tokens"] > 0
    cache.advance(3601)  # the offset tests and benchmarks use instead of waiting
    assert cache.usage(body(BIG, marks=(0,), ttl="1h"))["cache_read_input_tokens"] == 0


def test_the_lookback_finds_a_prefix_up_to_20_blocks_before_the_breakpoint(
    cache: PromptCache,
) -> None:
    turns = [BIG] + [f"message {i}" for i in range(30)]
    cache.usage(body(*turns[:2], marks=(1,)))
    near = cache.usage(body(*turns[:22], marks=(21,)))  # 20 blocks on: still found
    assert near["cache_read_input_tokens"] > 6000
    cache.clear()
    cache.usage(body(*turns[:2], marks=(1,)))
    far = cache.usage(body(*turns[:23], marks=(22,)))  # 21 blocks on: out of reach
    assert far["cache_read_input_tokens"] == 0


def test_a_change_before_the_breakpoint_misses(cache: PromptCache) -> None:
    cache.usage(body(BIG, "reply", "q1", marks=(1,)))
    changed = cache.usage(body(BIG + "!", "reply", "q2", marks=(1,)))
    assert changed["cache_read_input_tokens"] == 0


def test_automatic_caching_marks_the_last_block(cache: PromptCache) -> None:
    auto = body(BIG, "a1", "q2") | {"cache_control": MARK}
    assert cache.usage(auto)["cache_creation_input_tokens"] > 6000
    longer = body(BIG, "a1", "q2", "a2", "q3") | {"cache_control": MARK}
    assert cache.usage(longer)["cache_read_input_tokens"] > 6000


def test_breakpoint_rules_the_api_enforces() -> None:
    five = body("a", "b", "c", "d", "e", marks=(0, 1, 2, 3, 4))
    assert "maximum of 4" in (breakpoint_problem(five) or "")
    four_and_auto = body("a", "b", "c", "d", "e", marks=(0, 1, 2, 3)) | {"cache_control": MARK}
    assert "maximum of 4" in (breakpoint_problem(four_and_auto) or "")
    mixed = body("a", "b", marks=(0, 1))
    mixed["messages"][1]["content"][0]["cache_control"] = MARK | {"ttl": "1h"}
    assert "1h" in (breakpoint_problem(mixed) or "")
    assert breakpoint_problem(body("a", "b", marks=(0, 1), ttl="1h")) is None


# -- agentd's side: layout, adapter, pricing -------------------------------------------------


def conversation(n: int) -> list[Message]:
    return [Message(role="user" if i % 2 == 0 else "assistant", content=f"m{i}") for i in range(n)]


def test_breakpoints_go_on_the_history_end_and_the_newest_tool_results() -> None:
    first = with_breakpoints(conversation(5), turn_start=4)
    assert [m.cache for m in first] == [False, False, False, True, False]
    looped = with_breakpoints(conversation(7), turn_start=4)
    assert [m.cache for m in looped] == [False, False, False, True, False, False, True]
    assert [m.cache for m in with_breakpoints(conversation(1), turn_start=0)] == [False]
    assert [m.cache_brief for m in looped] == [False] * 6 + [True]


def test_tool_loop_breakpoints_take_the_cheaper_ttl_after_the_hour_long_ones() -> None:
    req = LLMRequest(
        system=build_system(persona="Kind.", name="agentd"),
        messages=with_breakpoints(conversation(7), turn_start=4),
    )
    params = build_params(req, "claude-haiku-4-5", 100, cache_ttl="1h")
    marks = [
        b["cache_control"] for m in params["messages"] for b in m["content"] if "cache_control" in b
    ]
    assert marks == [{"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral", "ttl": "5m"}]
    assert breakpoint_problem(params) is None  # 1-hour entries first, as the API requires


def test_the_request_keeps_per_call_text_after_every_breakpoint() -> None:
    now = datetime(2026, 11, 23, 10, 5, tzinfo=UTC)
    system = build_system(persona="Kind.", name="agentd")
    context = build_context(now=now, facts="Lives in </data> Lyon", memories="Likes tea")
    req = LLMRequest(system=system, messages=with_breakpoints(conversation(3), 2), context=context)
    params = build_params(req, "claude-haiku-4-5", 100)
    assert "2026-11-23T10:05" not in params["system"][0]["text"]
    assert params["system"][0]["cache_control"] == MARK
    newest = params["messages"][-1]["content"]
    assert newest[0] == {"type": "text", "text": "m2"}
    assert "Current date and time: 2026-11-23T10:05+00:00 (UTC)." in newest[-1]["text"]
    assert "<data>\nLives in &lt;/data> Lyon\n</data>" in newest[-1]["text"]  # R-SP-2
    assert params["messages"][1]["content"][-1]["cache_control"] == MARK
    marks = [b for m in params["messages"] for b in m["content"] if "cache_control" in b]
    assert len(marks) == 1 and "tools" not in params
    hour = build_params(req, "claude-haiku-4-5", 100, cache_ttl="1h")
    assert hour["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


RULE = WindowRule(limit=20, step=10, cold_after=3660, min_tokens=1024)


def chat(n: int, *, chars: int = 400, last_at: float = 0.0) -> list[Past]:
    """n stored messages a minute apart, the newest at `last_at`."""
    return [Past(id=i + 1, created_at=last_at - 60 * (n - 1 - i), chars=chars) for i in range(n)]


def run(turns: int, rule: WindowRule = RULE, pauses: dict[int, float] | None = None) -> list[int]:
    """The window's first message id at each turn of a chat of 2 messages per turn."""
    kept: int | None = None
    now, starts, past = 0.0, [], []
    for turn in range(turns):
        now += (pauses or {}).get(turn, 60)
        index = window_start(past, kept, now, rule)
        kept = past[index].id if index < len(past) else len(past) + 1
        starts.append(kept)
        past += [Past(id=len(past) + i + 1, created_at=now + i, chars=400) for i in range(2)]
    return starts


def test_the_history_window_moves_in_steps() -> None:
    starts = run(40)
    assert starts[:15] == [1] * 15  # grows to limit + step - 1 = 29 messages
    assert starts[15] == 11 and starts[15:20] == [11] * 5  # a jump keeps the newest 20
    assert len(set(starts)) == 1 + (40 - 15 + 4) // 5  # one jump per step of 10 messages
    assert window_start(chat(50), None, 0.0, RULE.model_copy(update={"limit": 0})) == 50


def test_after_a_pause_longer_than_the_cache_ttl_the_window_is_cut_back() -> None:
    warm = run(20)
    cold = run(20, pauses={12: 7200})  # two hours before turn 12: the cached prefix is gone
    assert warm[12] == 1 and cold[12] == 5  # cut to the newest 20 of 24 messages, for free
    assert cold[13:17] == [5] * 4  # and the next forced jump comes later than it would have
    assert warm[15] == 11 and cold[15] == 5
    short = run(20, pauses={12: 3000})  # inside the TTL: the cache is still warm, no cut
    assert short == warm


def test_a_cut_keeps_enough_history_to_reach_the_model_minimum() -> None:
    past = chat(60, chars=100, last_at=0.0)  # 25 tokens a message
    rule = RULE.model_copy(update={"min_tokens": 1024, "step": 50})
    start = window_start(past, 1, 7200.0, rule)
    assert len(past) - start == 48  # 48 × 25 = 1,200 ≥ 1,024 × 1.15; 20 would not cache
    fixed = rule.model_copy(update={"fixed_tokens": 1000})  # the system prompt counts too
    assert len(past) - window_start(past, 1, 7200.0, fixed) == 20
    small = chat(25, chars=100)
    assert window_start(small, 1, 7200.0, rule) == 0  # a cut never grows the window
    assert cache_minimum("claude-haiku-4-5-20251001") == 4096
    assert cache_minimum("claude-sonnet-4-5") == 1024 and cache_minimum("other") == 4096


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic.running(cache_min_tokens=None) as server:
        yield server


@pytest.fixture
async def llm(fake: FakeAnthropic) -> AsyncIterator[AnthropicLLM]:
    config = LLMConfig(
        base_url=fake.base_url, background_model="claude-3-5-haiku", cache_ttl="1h", retries=0
    )
    adapter = AnthropicLLM(config, "sk-test")
    yield adapter
    await adapter.close()


async def test_the_adapter_reads_the_cache_split_and_routes_background_work(
    fake: FakeAnthropic, llm: AnthropicLLM
) -> None:
    system = build_system(persona=BIG, name="agentd")
    turn = LLMRequest(system=system, messages=[Message(role="user", content="hi")])
    first = await llm.complete(turn)
    assert first.model == "claude-haiku-4-5"
    assert first.usage.cache_write_tokens == first.usage.cache_write_1h_tokens > 6000
    second = await llm.complete(turn)
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    summary = await llm.complete(turn.model_copy(update={"purpose": "summary"}))
    assert summary.model == "claude-3-5-haiku"
    assert summary.usage.cache_read_tokens == 0  # each model has its own cache
    assert [r["body"]["model"] for r in fake.requests][-1] == "claude-3-5-haiku"


def test_prices_cost_and_saving() -> None:
    haiku = price_for("claude-haiku-4-5-20251001")
    assert haiku.input == 1.0 and haiku.cache_write_1h == 2.0
    assert price_for("unknown-model") == haiku
    custom = ModelPrice(input=2, output=2, cache_read=0.2, cache_write_5m=2.5, cache_write_1h=4)
    assert price_for("claude-haiku-4-5", {"claude-haiku-4-5": custom}) == custom
    t = Tokens(
        input_tokens=1_000_000,
        output_tokens=0,
        cache_read_tokens=1_000_000,
        cache_write_tokens=1_000_000,
        cache_write_1h_tokens=500_000,
    )
    assert cost(t, haiku) == pytest.approx(1.0 + 0.1 + 0.5 * 1.25 + 0.5 * 2.0)
    assert uncached_cost(t, haiku) == pytest.approx(3.0)
    rows = [
        UsageTotals(
            day="2026-11-23", chat_id=1, model="claude-haiku-4-5", calls=2, **t.model_dump()
        ),
        UsageTotals(
            day="2026-11-23", chat_id=1, model="claude-sonnet-4-5", calls=1, input_tokens=1_000_000
        ),
    ]
    [day] = report(rows)
    assert day.calls == 3 and day.models == ["claude-haiku-4-5", "claude-sonnet-4-5"]
    assert day.cache_hit_ratio == pytest.approx(0.25)
    assert day.estimated_cost_usd == pytest.approx(2.725 + 3.0)
    assert day.estimated_saving_usd == pytest.approx(3.0 - 2.725)
