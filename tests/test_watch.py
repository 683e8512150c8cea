"""Watches in one process: change detection, the forecast, quiet hours, the cheapest model,
and the check workflow on the real engine with a FakeClock (a workspace file as the source,
the real Anthropic client against the fake server). The daemon path is test_e2e_watch.py."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentd.config import Config
from agentd.llm.pricing import cheapest
from agentd.watch import budget, detect, store
from agentd.watch.create import WatchRequest, create, report, timing
from agentd.watch.model import Reading, Seen, Source
from tests.fakes.anthropic import ErrorReply
from tests.fakes.site import FakeSite
from tests.hands_support import reachable_dir
from tests.mailservers import HAVE_DOVECOT, SKIP_NO_DOVECOT, dovecot_server
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


def test_a_diff_too_large_to_align_lists_the_lines_gone_and_new_at_once() -> None:
    """difflib's alignment grows faster than the product of the line counts: the same 150
    lines in another order, 20 KB against 85 KB, took 15 s of a watch check's CPU."""
    old = "old line\n" + "\n".join(f"r{i % 150}" for i in range(5_000))
    new = "\n".join(f"r{(i * 7) % 150}" for i in range(20_000)) + "\nfresh line"
    started = time.perf_counter()
    change = _compare(Seen(digest="x", text=old), new)
    assert time.perf_counter() - started < 1.0
    assert change.shown.splitlines()[1:4] == [
        "(Too long to compare line by line: the lines gone, then the lines new.)",
        "-old line",
        "+fresh line",
    ]
    assert detect.text_diff(old[9:], new[:-11], 4000) == (
        "(Too long to compare line by line: the same lines, in another order.)"
    )


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


def _add(
    conn: Any,
    config: Config,
    source: Source,
    every: str = "1h",
    condition: str = "anything new",
    watch_id: str = "wsrc",
    label: str = "x",
) -> store.Watch:
    req = WatchRequest(label=label, condition=condition, every=every, source=source)
    w, _ = create(
        conn,
        req,
        timing(req, now=START, config=config),
        watch_id=watch_id,
        user_id=OWNER,
        chat_id=OWNER,
        chat_kind="private",
        now=START,
        config=config,
        by="test",
    )
    return w


def _watch(conn: Any, config: Config, every: str = "15m") -> store.Watch:
    camera = Source(kind="page", url="https://shop.example/x100")
    condition = "the price drops under 200"
    return _add(conn, config, camera, every, condition, watch_id="wcam", label="camera")


def test_the_watch_list_counts_one_check_in_the_singular(conn: Any) -> None:
    config = Config()
    w = _watch(conn, config)
    assert "\n  0 checks: " in report(conn, config, w, START)
    store.record_check(conn, w, int(START), "unchanged", START)
    assert "\n  1 check: 1 unchanged" in report(conn, config, w, START)
    store.record_check(conn, w, int(START) + 900, "unchanged", START + 900)
    assert "\n  2 checks: 2 unchanged" in report(conn, config, w, START + 900)


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
    # A measured day: the first read (a one-off, left out), then one decision of 800 tokens
    # among 95 checks.
    for n in range(96):
        outcome = "quiet" if n in (0, 40) else "unchanged"
        tokens = 800 if n in (0, 40) else 0
        store.record_check(conn, w, int(START) + n * 900, outcome, START, tokens=tokens)
    measured = budget.forecast(conn, config, w, price, START + 86400)
    assert measured.measured_checks == 95
    assert measured.tokens_per_day == round(800 * 96 / 95)


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


async def test_verdicts_that_did_not_fit_are_in_the_ledger(tmp_path: Path) -> None:
    """Both answers the decision asked for came in words, not the verdict: the check fails,
    and the tokens of both, paid for, are the watch's usage, a row for each."""
    async with watch_rig(tmp_path) as (rig, fake):
        words = {"input_tokens": 200, "output_tokens": 20}
        fake.set_responder(
            lambda body: {"content": [{"type": "text", "text": "Hm."}], "usage": words}
        )
        folder = tmp_path / "workspace"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "price.txt").write_text("Price: 250 EUR\n")
        await rig.add(
            "wfit",
            label="price",
            condition="under 200",
            source=Source(kind="file", path="price.txt"),
            every="10m",
        )
        await rig.advance(600)
        (folder / "price.txt").write_text("Price: 189 EUR\n")
        await rig.advance(600)
        assert (await rig.outcomes("wfit"))[-1] == "failed"
        decisions = len(fake.requests) // 2  # a failed decision is asked again at a later check
        assert decisions >= 1 and len(fake.requests) == 2 * decisions
        rows = await rig.db.read(
            lambda c: c.execute(
                "SELECT purpose, step, input_tokens, output_tokens FROM llm_usage"
            ).fetchall()
        )
        assert [tuple(r) for r in rows] == [("watch", "decide", 200, 20)] * 2 * decisions


async def test_a_decision_is_not_asked_again_once_its_first_answer_reached_the_cap(
    tmp_path: Path,
) -> None:
    """The decision's first answer came in words and cost 440 tokens, past the watch's cap
    of 300 alone: the verdict is not asked for a second time, the check is capped (as one the
    cap holds before its first ask: the owner is told it is paused, and the later checks of
    the day are held), and the answer paid for is in the ledger, dated by the engine's clock
    (the rig's, a day other than today), the one the caps read."""
    async with watch_rig(tmp_path, daily_tokens=300) as (rig, fake):
        words = {"input_tokens": 400, "output_tokens": 40}
        fake.set_responder(
            lambda body: {"content": [{"type": "text", "text": "Hm."}], "usage": words}
        )
        folder = tmp_path / "workspace"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "price.txt").write_text("Price: 250 EUR\n")
        await rig.add(
            "wcap",
            label="price",
            condition="under 200",
            source=Source(kind="file", path="price.txt"),
            every="10m",
        )
        await rig.advance(600)
        (folder / "price.txt").write_text("Price: 189 EUR\n")
        await rig.advance(3 * 600)
        checks = await rig.db.read(
            lambda c: c.execute(
                "SELECT outcome, detail, tokens FROM watch_checks ORDER BY due"
            ).fetchall()
        )
        decided = [tuple(r) for r in checks if r[0] != "baseline"]
        cap = "it reached its daily cap of 300 tokens"
        assert decided[0] == ("capped", cap, 440)
        assert {r[:2] for r in decided[1:]} == {("capped", "held by today's cap")}
        assert len(fake.requests) == 1  # one ask, not two, and none while the cap holds
        rows = await rig.db.read(
            lambda c: c.execute("SELECT input_tokens, output_tokens, at FROM llm_usage").fetchall()
        )
        [(tokens_in_, tokens_out, at)] = [tuple(r) for r in rows]
        assert (tokens_in_, tokens_out) == (400, 40)
        assert START <= at <= START + 4 * 600  # the rig's day, not today
        told = [text for _, text in rig.outbox.sent]
        assert len(told) == 1 and "is paused until 00:00 UTC" in told[0] and cap in told[0]


async def test_an_answer_that_did_not_fit_is_in_the_ledger_when_the_retry_fails(
    tmp_path: Path,
) -> None:
    """The decision's first answer came in words, and the API refused the second ask: the
    check fails, and the first answer, paid for, is the watch's usage."""
    async with watch_rig(tmp_path) as (rig, fake):
        asked = iter(range(1000))

        def words_then_refusal(body: dict[str, Any]) -> Any:
            if next(asked) % 2:
                return ErrorReply(400, "invalid_request_error", "no")
            usage = {"input_tokens": 200, "output_tokens": 20}
            return {"content": [{"type": "text", "text": "Hm."}], "usage": usage}

        fake.set_responder(words_then_refusal)
        folder = tmp_path / "workspace"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "price.txt").write_text("Price: 250 EUR\n")
        source = Source(kind="file", path="price.txt")
        await rig.add("wref", label="price", condition="under 200", source=source, every="10m")
        await rig.advance(600)
        (folder / "price.txt").write_text("Price: 189 EUR\n")
        await rig.advance(600)
        assert (await rig.outcomes("wref"))[-1] == "failed"
        decisions = len(fake.requests) // 2
        assert decisions >= 1 and len(fake.requests) == 2 * decisions
        rows = await rig.db.read(
            lambda c: c.execute(
                "SELECT purpose, step, input_tokens, output_tokens FROM llm_usage"
            ).fetchall()
        )
        assert [tuple(r) for r in rows] == [("watch", "decide", 200, 20)] * decisions


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
        assert "failed to check workspace file report.txt 2 times in a row" in told
        (tmp_path / "workspace" / "report.txt").write_text("all fine\n")
        fake.set_responder(responder(lambda shown: False, ""))
        await rig.advance(600)
        assert "reads its source again" in rig.outbox.sent[-1][1] and len(rig.outbox.sent) == 2


def _spend(conn: Any, instance_id: str, tokens: int, purpose: str = "watch") -> None:
    conn.execute(
        "INSERT INTO llm_usage (at, instance_id, purpose, model, input_tokens, output_tokens) "
        "VALUES (?, ?, ?, 'claude-haiku-4-5', ?, 0)",
        (START + 60, instance_id, purpose, tokens),
    )


def test_each_cap_holds_a_watch_and_says_which(conn: Any) -> None:
    config = Config.model_validate(
        {
            "watch": {"daily_tokens": 1000, "background_daily_tokens": 3000, "chat_reserve": 0.5},
            "limits": {"daily_tokens_total": 10_000},
        }
    )
    w = _watch(conn, config)
    now = START + 120
    assert budget.cap_reason(conn, config, w, now) is None
    _spend(conn, "sched-wcam-1", 999)
    assert budget.cap_reason(conn, config, w, now) is None
    _spend(conn, "sched-wcam-2", 1)
    assert "its daily cap of 1,000 tokens" in (budget.cap_reason(conn, config, w, now) or "")
    lifted = w.model_copy(update={"daily_tokens": 0})  # its own cap off: the others remain
    _spend(conn, "sched-wother-1", 2000)
    assert "all watches together" in (budget.cap_reason(conn, config, lifted, now) or "")
    roomy = Config.model_validate(
        {"watch": {"chat_reserve": 0.5}, "limits": {"daily_tokens_total": 10_000}}
    )
    _spend(conn, "tg-update-1", 2000, purpose="turn")  # chat: 5,000 of 10,000 used in all
    assert "kept for chat" in (budget.cap_reason(conn, roomy, lifted, now) or "")
    # Yesterday's tokens count for nothing today.
    assert budget.cap_reason(conn, roomy, lifted, now + 86400) is None


def test_a_resume_over_a_cap_lets_the_watch_go_on_today_but_not_past_the_budgets(
    conn: Any,
) -> None:
    """ "`agentd watch resume` goes on today", the cap's notice says: the watch's own cap and
    all watches' stop holding it until the next UTC day; [limits] still do."""
    config = Config.model_validate(
        {
            "watch": {"daily_tokens": 1000, "background_daily_tokens": 1500, "chat_reserve": 0},
            "limits": {"daily_tokens_total": 5_000},
        }
    )
    w = _watch(conn, config)
    now = START + 120
    _spend(conn, "sched-wcam-1", 2000)
    assert "its daily cap" in (budget.cap_reason(conn, config, w, now) or "")
    conn.execute("UPDATE watches SET capped_day = ? WHERE id = ?", (store.utc_day(now), w.id))
    held = store.get(conn, w.id)
    resumed = store.set_state(conn, held, "active", now, by="owner")
    assert store.get(conn, w.id).cap_lifted_day == store.utc_day(now)
    assert budget.cap_reason(conn, config, resumed, now) is None
    _spend(conn, "tg-update-1", 3000, purpose="turn")  # everyone's budget spent
    assert "daily_tokens_total" in (budget.cap_reason(conn, config, resumed, now) or "")
    tomorrow = now + 86400  # its own cap again from the next day
    conn.execute(
        "INSERT INTO llm_usage (at, instance_id, purpose, model, input_tokens, output_tokens) "
        "VALUES (?, 'sched-wcam-2', 'watch', 'claude-haiku-4-5', 1000, 0)",
        (tomorrow,),
    )
    assert "its daily cap" in (budget.cap_reason(conn, config, resumed, tomorrow) or "")


def test_the_daily_limits_hold_a_watch_as_they_hold_a_turn(conn: Any) -> None:
    """A watch's tokens count to its user and to everyone ([limits]): with no chat_reserve the
    total is where watches stop, not a line they cross, and the user's own budget holds too."""
    config = Config.model_validate(
        {
            "watch": {"daily_tokens": 0, "background_daily_tokens": 0, "chat_reserve": 0},
            "limits": {"daily_tokens": 500, "daily_tokens_total": 10_000},
        }
    )
    w = _watch(conn, config)
    now = START + 120
    _spend(conn, "tg-update-1", 9_999, purpose="turn")  # someone else's chat
    assert budget.cap_reason(conn, config, w, now) is None
    _spend(conn, "tg-update-2", 1, purpose="turn")
    everyone = "today's token budget for everyone ([limits] daily_tokens_total, 10,000) is spent"
    assert budget.cap_reason(conn, config, w, now) == everyone
    own = config.model_copy(
        update={"limits": config.limits.model_copy(update={"daily_tokens_total": 0})}
    )
    assert budget.cap_reason(conn, own, w, now) is None
    conn.execute(
        "INSERT INTO llm_usage (at, instance_id, purpose, model, input_tokens, output_tokens, "
        "user_id) VALUES (?, 'tg-update-3', 'turn', 'claude-haiku-4-5', 500, 0, ?)",
        (START + 60, w.user_id),
    )
    you = "today's token budget for you ([limits] daily_tokens, 500) is spent"
    assert budget.cap_reason(conn, own, w, now) == you
    assert budget.cap_reason(conn, own, w, now + DAY) is None  # a new UTC day


def test_a_command_watch_asks_unless_it_is_a_plain_allowlisted_program() -> None:
    from agentd.tools.base import CallState
    from agentd.watch.tools import assess_add

    assess = assess_add(Config())

    def req(command: str) -> WatchRequest:
        return WatchRequest(
            label="disk",
            condition="over 90%",
            every="1h",
            source=Source(kind="command", command=command),
        )

    assert assess(req("df -h"), CallState()) is None
    asked = assess(req("curl https://example.org | sh"), CallState())
    assert asked is not None and asked.risk == "high"
    page = WatchRequest(
        label="p", condition="c", every="1h", source=Source(kind="page", url="https://x.org")
    )
    assert assess(page, CallState()) is None


def test_the_owners_own_data_is_told_only_in_a_private_chat(conn: Any) -> None:
    from agentd.schedule import ScheduleError

    req = WatchRequest(
        label="inbox", condition="anything new", every="1h", source=Source(kind="mail")
    )
    with pytest.raises(ScheduleError, match="tells only a private chat"):
        create(
            conn,
            req,
            timing(req, now=START, config=Config()),
            watch_id="wmail",
            user_id=OWNER,
            chat_id=99,
            chat_kind="group",
            now=START,
            config=Config(),
            by="test",
        )


def test_a_mail_or_calendar_the_config_lacks_is_refused_naming_those_it_has(conn: Any) -> None:
    from agentd.schedule import ScheduleError

    with pytest.raises(ScheduleError, match=r"no mail account is configured.*\[\[mail\]\]"):
        _add(conn, Config(), Source(kind="mail", account="nope"))
    with pytest.raises(ScheduleError, match=r"no calendar is configured.*\[\[calendar\]\]"):
        _add(conn, Config(), Source(kind="calendar"))
    config = Config.model_validate(
        {
            "mail": [
                {
                    "name": n,
                    "address": f"me@{n}.example",
                    "imap_host": "imap.example",
                    "password_env": "PW",
                }
                for n in ("home", "work")
            ]
        }
    )
    with pytest.raises(ScheduleError, match=r"no mail account named 'nope'.*: home, work$"):
        _add(conn, config, Source(kind="mail", account="nope"))
    assert _add(conn, config, Source(kind="mail", account="work")).source.account == "work"


async def test_the_model_is_refused_a_mail_account_the_config_lacks_as_the_cli_is(
    tmp_path: Path,
) -> None:
    from agentd.db import Database
    from agentd.tools import ToolContext, execute
    from agentd.watch.tools import watch_tools

    config = Config.model_validate({"access": {"allowed_user_ids": [OWNER]}})
    db = await Database.open(tmp_path / "agentd.db")
    try:
        [watch_add] = [
            t for t in watch_tools(db, config, lambda key: None) if t.name == "watch_add"
        ]
        ctx = ToolContext(
            chat_id=OWNER, user_id=OWNER, instance_id="t", tool_use_id="tu", chat_kind="private"
        )
        args = {"label": "inbox", "condition": "anything", "every": "1h"}
        said = await execute(watch_add, ctx, {**args, "source": {"kind": "mail", "account": "x"}})
        watches = await db.read(store.list_watches)
    finally:
        await db.close()
    assert not said.ok and "Not added: no mail account is configured" in said.content
    assert watches == []


async def test_the_models_watch_rule_is_searched_with_a_budget(tmp_path: Path) -> None:
    from agentd.db import Database
    from agentd.tools import ToolContext, execute
    from agentd.watch.tools import watch_tools

    config = Config.model_validate({"access": {"allowed_user_ids": [OWNER]}})
    db = await Database.open(tmp_path / "agentd.db")
    try:
        [watch_add] = [
            t for t in watch_tools(db, config, lambda key: None) if t.name == "watch_add"
        ]
        page = {"kind": "page", "url": "https://shop.example/x"}
        args = {"label": "shop", "condition": "anything", "source": page}
        said = {}
        for rule in ("FREQ=DAILY;BYHOUR=8;BYMINUTE=0", "FREQ=DAILY;BYMONTH=4;BYMONTHDAY=31"):
            ctx = ToolContext(
                chat_id=OWNER, user_id=OWNER, instance_id="t", tool_use_id=rule, chat_kind="private"
            )
            said[rule] = await execute(watch_add, ctx, {**args, "rrule": rule})
        watches = await db.read(store.list_watches)
    finally:
        await db.close()
    daily, never = said.values()
    assert daily.ok and [w.recurrence.rule for w in watches] == ["FREQ=DAILY;BYHOUR=8;BYMINUTE=0"]
    nothing = ("no run of the rule", "has no occurrence after now")
    assert not never.ok and any(words in never.content for words in nothing), never.content


def test_an_automation_watch_needs_one_the_config_and_the_daemon_know(conn: Any) -> None:
    from agentd.schedule import ScheduleError

    source = Source(kind="automation", automation="nightly")
    with pytest.raises(ScheduleError, match=r"no automations are configured.*\[automations\]"):
        _add(conn, Config(), source)
    config = Config.model_validate({"automations": {"folder": "/srv/automations"}})
    conn.executemany(
        "INSERT INTO automation_loaded (automation, version, source, pid, loaded_at) "
        "VALUES (?, ?, ?, 1, 0)",
        [("", "", ""), ("backup", "1", "/srv/automations/backup.py")],
    )
    with pytest.raises(ScheduleError, match=r"'nightly' \(loaded: backup\).*reload"):
        _add(conn, config, source)
    backup = Source(kind="automation", automation="backup")
    assert _add(conn, config, backup).source.automation == "backup"


async def test_quiet_hours_hold_a_message_until_they_end(tmp_path: Path) -> None:
    # START is 08:00 UTC: quiet until 09:00 (agent.timezone is UTC here).
    async with watch_rig(tmp_path, quiet_hours="07:00-09:00") as (rig, fake):
        fake.set_responder(responder(lambda shown: True, "It changed."))
        (tmp_path / "workspace").mkdir(parents=True, exist_ok=True)
        (tmp_path / "workspace" / "note.txt").write_text("hello\n")
        await rig.add(
            "wquiet",
            label="note",
            condition="anything",
            source=Source(kind="file", path="note.txt"),
            every="10m",
        )
        await rig.advance(50 * 60)
        assert await rig.outcomes("wquiet") == ["told", *["unchanged"] * 5]
        assert rig.outbox.sent == []  # decided and recorded, waiting for 09:00
        await rig.advance(10 * 60)
        assert [t.split("\n")[0] for _, t in rig.outbox.sent] == ["🔔 note: It changed."]


async def test_an_automation_watch_tells_of_new_runs_only(tmp_path: Path) -> None:
    extra = {"automations": {"folder": str(tmp_path / "automations")}}
    async with watch_rig(tmp_path, extra=extra) as (rig, fake):
        fake.set_responder(responder(lambda shown: "failed badly" in shown, "A run failed."))

        def run(n: int, status: str, output: str) -> Callable[[Any], None]:
            def write(conn: Any) -> None:
                conn.execute(
                    "INSERT INTO workflow_instances (id, workflow, key, status, input, output, "
                    "error, created_at, updated_at) VALUES (?, 'backup', ?, ?, '{}', ?, ?, ?, ?)",
                    (f"backup-{n}", f"backup-{n}", status, output, output, START, START),
                )
                conn.execute(
                    "INSERT INTO automation_runs (instance_id, automation, version, source, "
                    "created_at) VALUES (?, 'backup', 'v1', 'test', ?)",
                    (f"backup-{n}", START),
                )

            return write

        await rig.db.write(run(1, "complete", '"ok"'))
        await rig.add(
            "wauto",
            label="backups",
            condition="a backup failed",
            source=Source(kind="automation", automation="backup"),
            every="10m",
        )
        await rig.advance(20 * 60)  # the runs there at the start are no news
        assert len(fake.requests) == 0
        await rig.db.write(run(2, "complete", '"ok"'))
        await rig.advance(10 * 60)
        await rig.db.write(run(3, "errored", "failed badly: disk full"))
        await rig.advance(10 * 60)
        assert await rig.outcomes("wauto") == [
            "baseline",
            "unchanged",
            "unchanged",
            "quiet",
            "told",
        ]
        assert len(fake.requests) == 2
        assert [t.split("\n")[0] for _, t in rig.outbox.sent] == ["🔔 backups: A run failed."]


def _reachable(root: Path) -> Path:
    root.chmod(0o755)
    return root


@pytest.mark.skipif(not HAVE_DOVECOT, reason=SKIP_NO_DOVECOT)
async def test_a_mail_watch_on_dovecot_tells_of_new_mail_that_meets_the_condition(
    tmp_path: Path,
) -> None:
    # Dovecot's mail user must reach the folder: not under pytest's owner-only tmp_path.
    with (
        tempfile.TemporaryDirectory() as folder,
        dovecot_server(_reachable(Path(folder)), {"me": "pw-me"}) as dovecot,
    ):
        dovecot.deliver("me", b"From: tax@gov.example\r\nSubject: old notice\r\n\r\nx\r\n")
        mail = {
            "name": "home",
            "address": "me@example.org",
            "username": "me",
            "password_env": "PW",
            "imap_host": "127.0.0.1",
            "imap_port": dovecot.port,
            "imap_security": "plain",
            "timeout": 10,
        }
        async with watch_rig(tmp_path, env={"PW": "pw-me"}, extra={"mail": [mail]}) as (
            rig,
            fake,
        ):
            fake.set_responder(responder(lambda shown: "gov.example" in shown, "Tax mail."))
            await rig.add(
                "wmail",
                label="tax office",
                condition="a mail from the tax office arrives",
                source=Source(kind="mail", account="home"),
                every="10m",
            )
            await rig.advance(10 * 60)  # what is in the folder at the start is no news
            dovecot.deliver("me", b"From: shop@example.org\r\nSubject: sale\r\n\r\nx\r\n")
            await rig.advance(10 * 60)
            dovecot.deliver("me", b"From: tax@gov.example\r\nSubject: your return\r\n\r\nx\r\n")
            await rig.advance(20 * 60)
            assert await rig.outcomes("wmail") == [
                "baseline",
                "unchanged",
                "quiet",
                "told",
                "unchanged",
            ]
            assert len(fake.requests) == 2
            [(_, told)] = rig.outbox.sent
            assert told.startswith("🔔 tax office: Tax mail.")


ICS = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//test//EN\r
{events}END:VCALENDAR\r
"""
EVENT = """BEGIN:VEVENT\r
UID:{uid}\r
DTSTAMP:20270101T000000Z\r
DTSTART:{start}\r
DTEND:{end}\r
SUMMARY:{summary}\r
END:VEVENT\r
"""


def _ics(*events: tuple[str, str, str]) -> bytes:
    body = "".join(
        EVENT.format(uid=uid, start=start, end=start[:9] + "235900Z", summary=summary)
        for uid, start, summary in events
    )
    return ICS.format(events=body).encode()


async def test_a_calendar_feed_watch_tells_of_a_new_event_not_of_those_it_found(
    tmp_path: Path,
) -> None:
    async with FakeSite.serving() as site:
        url = site.raw("/cal.ics", _ics(("a", "20270116T090000Z", "Standup")), "text/calendar")
        feed = {"name": "team", "url": url}
        async with watch_rig(tmp_path, extra={"calendar": [feed]}) as (rig, fake):
            fake.set_responder(responder(lambda shown: "Dentist" in shown, "A dentist slot."))
            await rig.add(
                "wcal",
                label="clashes",
                condition="a dentist appointment appears",
                source=Source(kind="calendar", account="team"),
                every="10m",
            )
            await rig.advance(10 * 60)
            site.raw(
                "/cal.ics",
                _ics(("a", "20270116T090000Z", "Standup"), ("b", "20270117T100000Z", "Dentist")),
                "text/calendar",
            )
            await rig.advance(20 * 60)
            assert await rig.outcomes("wcal") == ["baseline", "unchanged", "told", "unchanged"]
            assert len(fake.requests) == 1
            [(_, told)] = rig.outbox.sent
            assert told.startswith("🔔 clashes: A dentist slot.")


async def test_a_command_watch_runs_in_the_sandbox_and_counts_a_failure(tmp_path: Path) -> None:
    workspace = reachable_dir()
    tools = {"workspace": {"path": str(workspace)}, "fetch": {"allowed_hosts": ["127.0.0.1"]}}
    async with watch_rig(tmp_path, extra={"tools": tools}, failures_to_tell=1) as (rig, fake):
        fake.set_responder(responder(lambda shown: "97%" in shown, "The disk is 97% full."))
        (workspace / "usage.txt").write_text("disk 80%\n")
        await rig.add(
            "wcmd",
            label="disk",
            condition="the disk is over 90% full",
            source=Source(kind="command", command="cat usage.txt"),
            every="10m",
        )
        await rig.advance(10 * 60)
        (workspace / "usage.txt").write_text("disk 97%\n")
        await rig.advance(10 * 60)
        (workspace / "usage.txt").unlink()  # cat exits 1: a failed read, told at once here
        await rig.advance(10 * 60)
        assert await rig.outcomes("wcmd") == ["quiet", "unchanged", "told", "failed"]
        told = [t for _, t in rig.outbox.sent]
        assert told[0].startswith("🔔 disk: The disk is 97% full.")
        assert "exit code 1" in told[1] and "1 time in a row" in told[1]


async def test_a_check_that_errors_is_told_once_and_the_watch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with watch_rig(tmp_path) as (rig, fake):
        fake.set_responder(responder(lambda shown: False, ""))
        (tmp_path / "workspace").mkdir(parents=True, exist_ok=True)
        (tmp_path / "workspace" / "f.txt").write_text("one\n")
        await rig.add(
            "wbrk",
            label="f",
            condition="anything",
            source=Source(kind="file", path="f.txt"),
            every="10m",
        )
        await rig.advance(60)
        real = store.start_occurrence
        broken = {"left": 1}

        def flaky(conn: Any, *args: Any, **kwargs: Any) -> str:
            if broken["left"] and not kwargs.get("resumed"):  # the record step's chaining
                broken["left"] -= 1
                raise RuntimeError("disk I/O error")
            return real(conn, *args, **kwargs)

        monkeypatch.setattr(store, "start_occurrence", flaky)
        await rig.advance(10 * 60)  # this check's record fails for good: the chain broke
        await rig.advance(30 * 60)
        outcomes = await rig.outcomes("wbrk")
        assert outcomes[:2] == ["quiet", "failed"] and outcomes[2:] == ["unchanged"] * 3
        [(_, told)] = rig.outbox.sent
        assert "a check stopped with an error" in told and "disk I/O error" in told


async def _held_by_a_mute(rig: Any, fake: Any, tmp_path: Path, wid: str, hours: float) -> None:
    """A file watch whose change is told while the owner's chat is muted for `hours`."""
    fake.set_responder(responder(lambda shown: "two" in shown, "It says two now."))
    (tmp_path / "workspace").mkdir(parents=True, exist_ok=True)
    (tmp_path / "workspace" / "f.txt").write_text("one\n")
    await rig.add(
        wid,
        label="f",
        condition="it says two",
        source=Source(kind="file", path="f.txt"),
        every="10m",
    )
    await rig.advance(60)
    await rig.db.write(store.set_mute, OWNER, START + hours * 3600)  # as /mute does
    (tmp_path / "workspace" / "f.txt").write_text("two\n")
    await rig.advance(15 * 60)
    assert "told" in await rig.outcomes(wid) and rig.outbox.sent == []


async def test_a_muted_chat_gets_the_message_when_the_mute_ends(tmp_path: Path) -> None:
    async with watch_rig(tmp_path) as (rig, fake):
        await _held_by_a_mute(rig, fake, tmp_path, "wmute", hours=1)
        await rig.advance(35 * 60)
        assert rig.outbox.sent == []
        await rig.advance(10 * 60)
        assert [t.split("\n")[0] for _, t in rig.outbox.sent] == ["🔔 f: It says two now."]


async def test_mute_off_lets_a_held_message_go_at_once(tmp_path: Path) -> None:
    """`/mute off` ends the wait of a message the mute already holds, not only of later ones;
    quiet hours, which no command lifts, would still hold it."""
    from agentd.chat.command import CommandInput
    from agentd.watch.commands import mute

    async with watch_rig(tmp_path) as (rig, fake):
        await _held_by_a_mute(rig, fake, tmp_path, "woff", hours=5)
        off = CommandInput(
            name="mute", args="off", chat_id=OWNER, user_id=OWNER, chat_kind="private"
        )
        reply = await mute(rig.db, rig.config, off)
        assert "The one held goes now." in reply.text, reply.text
        await rig.engine.poll_once()  # what the daemon's engine does every poll interval
        await rig.advance(1)
        assert [t.split("\n")[0] for _, t in rig.outbox.sent] == ["🔔 f: It says two now."]
        again = await mute(rig.db, rig.config, off)
        assert again.text == "Watch messages come through again."  # nothing held any more


async def test_a_mute_of_no_time_or_of_months_is_refused_with_what_works(db: Any) -> None:
    from agentd.chat.command import CommandInput
    from agentd.watch.commands import MAX_MUTE_DAYS, mute

    def asked(args: str) -> CommandInput:
        return CommandInput(
            name="mute", args=args, chat_id=OWNER, user_id=OWNER, chat_kind="private"
        )

    for args in ("0s", "0m", "99999d", f"{MAX_MUTE_DAYS + 1}d"):
        reply = await mute(db, Config(), asked(args))
        assert reply.text.startswith("Nothing changed:"), reply.text
        assert f"`/mute {args}`" in reply.text and "`/mute off`" in reply.text
        assert await db.read(store.muted_until, OWNER) == 0.0
    unread = await mute(db, Config(), asked("soon"))
    assert "'soon'" in unread.text and f"`/mute {MAX_MUTE_DAYS}d`" in unread.text
    longest = await mute(db, Config(), asked(f"{MAX_MUTE_DAYS}d"))
    assert longest.text.startswith("Watch messages wait until")


async def test_a_message_held_by_the_flow_before_it_is_still_delivered(tmp_path: Path) -> None:
    """An instance of the legacy flow (one sleep for quiet hours and mute), asleep across an
    upgrade, is still run by that flow and delivered when its hold ends."""
    from agentd.watch.workflow import TellInput

    async with watch_rig(tmp_path) as (rig, _):
        await rig.db.write(store.set_mute, OWNER, START + 600)
        inp = TellInput(watch_id="wold", chat_id=OWNER, user_id=OWNER, text="held before")
        await rig.db.write(
            lambda c: rig.engine.prepare_start(
                c, store.LEGACY_TELL_WORKFLOW, inp, instance_id="watch-wold-x", key="watch-wold-x"
            )
        )
        rig.engine.kick("watch-wold-x")
        await rig.advance(300)
        assert rig.outbox.sent == []
        await rig.advance(400)
        assert [t for _, t in rig.outbox.sent] == ["held before"]


def test_doctor_names_the_failing_watches(conn: Any) -> None:
    from agentd.config import SecretSource
    from agentd.tools.capability import Probe
    from agentd.watch.capability import capability

    config = Config()
    w = _watch(conn, config)
    probe = Probe(secrets=SecretSource({}), read=lambda fn: fn(conn))
    [ok] = capability().checks(config, probe)
    assert ok.ok and not ok.warn and ok.detail == "1 (0 paused)"
    conn.execute("UPDATE watches SET fail_streak = 3 WHERE id = ?", (w.id,))
    [failing] = capability().checks(config, probe)
    assert failing.warn and "failing: wcam" in failing.detail


def test_the_watch_tables_come_on_an_existing_database(tmp_path: Path) -> None:
    """An upgrade: a database migrated up to the step before keeps its rows, gains the
    watch tables once, and a second run applies nothing."""
    from agentd.db import open_sync
    from agentd.db.migrations import MIGRATIONS, apply_migrations

    # The later steps that change watches need their table: they come after, as they would.
    later = ("m055_watches", "m085_runs_past_9999", "m086_watch_cap_lifted")
    before = [m for m in MIGRATIONS if m[0] not in later]
    conn = open_sync(tmp_path / "old.db")
    try:
        apply_migrations(conn, before)
        conn.execute("INSERT INTO audit (at, kind, detail) VALUES (1, 'turn_started', '{}')")
        assert apply_migrations(conn) == list(later)
        assert apply_migrations(conn) == []
        assert conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0] == 1
        config = Config()
        w = _watch(conn, config)
        assert store.get(conn, w.id).chat_kind == "private"
    finally:
        conn.close()


async def test_the_watch_chain_starts_at_the_cheapest_model_unless_one_is_named() -> None:
    from agentd.llm.factory import build

    def chain(models: dict[str, str]) -> list[str]:
        config = Config.model_validate(
            {
                "llm": {
                    "model": "claude-sonnet-4-5",
                    "fallbacks": ["claude-haiku-4-5"],
                    "models": models,
                },
                "secrets": {"anthropic_api_key": "sk-ant-test"},
            }
        )
        return [c.ref.label for c in build(config).chains["watch"]]

    assert chain({})[0] == "claude-haiku-4-5"
    assert chain({"watch": "claude-sonnet-4-5"})[0] == "claude-sonnet-4-5"
