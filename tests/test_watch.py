"""Watches in one process: change detection, the forecast, quiet hours, the cheapest model,
and the check workflow on the real engine with a FakeClock (a workspace file as the source,
the real Anthropic client against the fake server). The daemon path is test_e2e_watch.py."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentd.config import Config
from agentd.llm.pricing import cheapest
from agentd.watch import budget, detect, store
from agentd.watch.create import WatchRequest, create
from agentd.watch.model import Reading, Seen, Source
from tests.watch_rig import OWNER, START, responder, watch_rig

DAY = 86400
PAGE = "Shop\nCamera X100\nPrice: 250 EUR\nVisitors today: 17\n"


def test_focus_keeps_only_the_lines_with_its_words_and_ignores_spacing() -> None:
    assert detect.focused(PAGE, "price") == "Price: 250 EUR"
    assert detect.focused("  a   b \n\n c ", "") == "a b\nc"
    assert detect.focused(PAGE, "PRICE|camera") == "Camera X100\nPrice: 250 EUR"


def _compare(seen: Seen | None, text: str, limit: int = 4000, at: float = START) -> Any:
    return detect.compare_text(seen, Reading(ok=True, text=text), "", limit, at=at, memory=DAY)


def test_an_unchanged_text_is_no_change_and_a_new_one_shows_lines_and_numbers() -> None:
    first = _compare(None, PAGE)
    assert first.kind == "changed" and "Current content" in first.shown
    same = _compare(first.seen, PAGE + "\n\n")
    assert same.kind == "none"
    moved = PAGE.replace("250", "189")
    change = _compare(first.seen, moved)
    assert change.kind == "changed"
    assert "-Price: 250 EUR" in change.shown and "+Price: 189 EUR" in change.shown
    assert "Numbers before: 100, 250, 17" in change.shown
    assert "Numbers now: 100, 189, 17" in change.shown


def test_a_state_decided_lately_is_not_asked_again_but_is_news_a_day_later() -> None:
    cheap = _compare(None, "Price: 189")
    told = detect.decided(cheap.seen, START)
    dear = _compare(told, "Price: 250", at=START + 600)
    # A page flipping between two versions: back to the told one, no call, nothing told.
    back = _compare(dear.seen, "Price: 189", at=START + 1200)
    assert back.kind == "decided_before"
    # The price went up and drops again two days later: that is news again.
    again = _compare(dear.seen, "Price: 189", at=START + 2 * DAY)
    assert again.kind == "changed"


def test_items_present_at_the_start_are_a_baseline_and_only_new_ids_count() -> None:
    start = detect.compare_items(None, Reading(ok=True, items={"1": "a", "2": "b"}), 4000)
    assert start.kind == "baseline" and start.seen.items == ["1", "2"]
    same = detect.compare_items(start.seen, Reading(ok=True, items={"2": "b", "1": "a"}), 4000)
    assert same.kind == "none"
    new = detect.compare_items(start.seen, Reading(ok=True, items={"2": "b", "3": "c"}), 4000)
    assert new.kind == "changed" and new.shown == "New since the last check:\n- c"


def test_a_diff_is_cut_to_what_the_model_may_be_shown() -> None:
    old = "\n".join(f"line {i}" for i in range(2000))
    change = _compare(Seen(digest="x", text=old), old.replace("line", "row"), limit=500)
    assert len(change.shown) <= 500


def test_quiet_hours_across_midnight_and_a_mute_hold_a_message() -> None:
    zone = ZoneInfo("Europe/Berlin")
    late = datetime(2027, 1, 15, 23, 30, tzinfo=zone).timestamp()
    morning = datetime(2027, 1, 16, 7, 0, tzinfo=zone).timestamp()
    assert budget.hold_until(late, "22:00-07:00", "Europe/Berlin", 0) == morning
    early = datetime(2027, 1, 16, 6, 0, tzinfo=zone).timestamp()
    assert budget.hold_until(early, "22:00-07:00", "Europe/Berlin", 0) == morning
    noon = datetime(2027, 1, 16, 12, 0, tzinfo=zone).timestamp()
    assert budget.hold_until(noon, "22:00-07:00", "Europe/Berlin", 0) == noon
    assert budget.hold_until(noon, "", "Europe/Berlin", noon + 7200) == noon + 7200
    # A mute that ends inside the quiet hours waits for their end.
    assert budget.hold_until(late - 3600, "22:00-07:00", "Europe/Berlin", late) == morning


def test_the_watch_purpose_defaults_to_the_cheapest_configured_model() -> None:
    config = Config.model_validate(
        {
            "llm": {
                "model": "claude-sonnet-4-5",
                "fallbacks": ["claude-3-5-haiku"],
                "providers": {"local": {"kind": "openai", "base_url": "http://x", "local": True}},
                "models": {"summary": "local/qwen2.5:7b"},
            }
        }
    )
    assert cheapest(config.llm) == "local/qwen2.5:7b"
    plain = Config.model_validate(
        {"llm": {"model": "claude-sonnet-4-5", "fallbacks": ["claude-haiku-4-5"]}}
    )
    assert cheapest(plain.llm) == "claude-haiku-4-5"


def _watch(conn: Any, config: Config, every: str = "15m") -> store.Watch:
    req = WatchRequest(
        label="camera",
        condition="the price drops under 200",
        source=Source(kind="page", url="https://shop.example/x100"),
        every=every,
    )
    w, _ = create(
        conn,
        req,
        watch_id="wcam",
        user_id=OWNER,
        chat_id=OWNER,
        chat_kind="private",
        now=START,
        config=config,
        by="test",
    )
    return w


def test_the_forecast_is_an_estimate_first_and_measured_after(conn: Any) -> None:
    config = Config()
    w = _watch(conn, config)
    price = budget.ModelPrice(
        input=1, output=5, cache_read=0.1, cache_write_5m=1.25, cache_write_1h=2
    )
    first = budget.forecast(conn, config, w, price, START)
    assert first.checks_per_day == 96 and first.measured_checks == 0
    # Two changes a day assumed, each one decision of ~1,000 tokens: about 2,000 a day.
    assert 1500 < first.tokens_per_day < 3000
    assert first.usd_per_month == pytest.approx(first.usd_per_day * 30, rel=1e-3)
    for n in range(96):  # a measured day: one decision of 800 tokens, 95 free checks
        outcome = "quiet" if n == 0 else "unchanged"
        store.record_check(
            conn, w, int(START) + n * 900, outcome, START, tokens=800 if n == 0 else 0
        )
    measured = budget.forecast(conn, config, w, price, START + 86400)
    assert measured.measured_checks == 96 and measured.tokens_per_day == 800


def test_too_frequent_checks_are_refused_with_the_key_to_change(conn: Any) -> None:
    from agentd.schedule import ScheduleError

    config = Config()
    with pytest.raises(ScheduleError, match=r"watch\.min_interval"):
        _watch(conn, config, every="1m")


async def test_a_file_watch_on_the_engine_asks_the_model_only_when_the_file_changed(
    tmp_path: Path,
) -> None:
    async with watch_rig(tmp_path) as (rig, fake):
        fake.set_responder(responder(lambda shown: "189" in shown, "Down to 189."))
        folder = tmp_path / "workspace"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "price.txt").write_text("Price: 250 EUR\n")
        await rig.add(
            "wfile",
            label="price",
            condition="under 200",
            source=Source(kind="file", path="price.txt"),
            every="10m",
        )
        await rig.advance(3 * 600)  # the first check (at once) and three more: one decision
        assert len(fake.requests) == 1
        (folder / "price.txt").write_text("Price: 189 EUR\n")
        await rig.advance(600)
        (folder / "price.txt").write_text("Price: 189 EUR\n\n")  # spacing only: no change
        await rig.advance(3 * 600)
        outcomes = await rig.outcomes("wfile")
        assert outcomes == ["quiet", *["unchanged"] * 3, "told", *["unchanged"] * 3]
        assert len(fake.requests) == 2
        assert [text.split("\n")[0] for _, text in rig.outbox.sent] == ["🔔 price: Down to 189."]


async def test_a_missing_file_fails_loudly_once_and_says_when_it_reads_again(
    tmp_path: Path,
) -> None:
    async with watch_rig(tmp_path, failures_to_tell=2) as (rig, fake):
        (tmp_path / "workspace").mkdir(parents=True, exist_ok=True)
        await rig.add(
            "wgone",
            label="report",
            condition="it mentions an error",
            source=Source(kind="file", path="report.txt"),
            every="10m",
        )
        await rig.advance(4 * 600)
        assert await rig.outcomes("wgone") == ["failed"] * 5
        [(_, told)] = rig.outbox.sent
        assert "could not read workspace file report.txt 2 times in a row" in told
        (tmp_path / "workspace" / "report.txt").write_text("all fine\n")
        fake.set_responder(responder(lambda shown: False, ""))
        await rig.advance(600)
        assert "reads its source again" in rig.outbox.sent[-1][1] and len(rig.outbox.sent) == 2
