"""Progress feedback only for slow answers: the real aiogram client against FakeTelegram.

"typing…" (R-TURN-1) and the first draft (R-TG-3) wait `chat.progress_delay`, so a turn
whose answer is there sooner makes no extra Bot API calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from agentd.agent.streaming import DraftStreamer
from agentd.channels import config_class
from agentd.telegram.bot import make_bot
from agentd.telegram.output import TelegramOutbox
from tests.daemon_process import TOKEN
from tests.fakes import FakeTelegram
from tests.heartbeat import LIMIT, heartbeat

CHAT = 11
OTHER = 12
DELAY = 0.2


@pytest.fixture(scope="module")
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram.running() as server:
        server.add_chat(CHAT)
        server.add_chat(OTHER)
        yield server


@pytest.fixture
async def outbox(tg: FakeTelegram) -> AsyncIterator[TelegramOutbox]:
    config = config_class().model_validate(
        {"telegram": {"api_base": tg.base_url}, "stored_secrets": {"TELEGRAM_BOT_TOKEN": TOKEN}}
    )
    bot = make_bot(config)
    yield TelegramOutbox(bot, progress_delay=DELAY)
    await bot.session.close()


async def test_a_quick_answer_shows_no_typing(tg: FakeTelegram, outbox: TelegramOutbox) -> None:
    before = len(tg.actions)
    async with outbox.typing(CHAT):
        await asyncio.sleep(0.01)  # the answer: there well before the delay
    # The marker: a slow answer in another chat, begun after this one ended. Its "typing…" is
    # due DELAY after it began, later than a timer the quick answer left running would fire.
    async with outbox.typing(OTHER):
        await asyncio.to_thread(
            tg.wait_until, lambda: any(a["chat_id"] == OTHER for a in tg.actions[before:]), 5
        )
    assert [a["chat_id"] for a in tg.actions[before:]] == [OTHER]


async def test_a_slow_answer_shows_typing_after_the_delay(
    tg: FakeTelegram, outbox: TelegramOutbox
) -> None:
    before = len(tg.actions)
    started = time.time()
    async with outbox.typing(CHAT):
        await asyncio.sleep(DELAY + 0.3)  # the slow answer itself: its duration is the test
    actions = tg.actions[before:]
    assert [(a["chat_id"], a["action"]) for a in actions] == [(CHAT, "typing")]
    assert actions[0]["time"] - started >= DELAY


async def test_no_delay_shows_typing_at_once(tg: FakeTelegram, outbox: TelegramOutbox) -> None:
    at_once = TelegramOutbox(outbox._bot, progress_delay=0)
    before = len(tg.actions)
    async with at_once.typing(CHAT):
        await asyncio.to_thread(tg.wait_until, lambda: len(tg.actions) > before, 5)
    assert len(tg.actions) == before + 1


async def test_drafts_start_after_the_delay_then_follow_the_interval(
    tg: FakeTelegram, outbox: TelegramOutbox
) -> None:
    now = [100.0]
    streamer = DraftStreamer(outbox, CHAT, 7, interval=0.5, monotonic=lambda: now[0], delay=0.3)
    before = len(tg.drafts)
    for at, text in [
        (100.0, "Hel"),
        (100.2, "Hello"),
        (100.3, "Hello wor"),
        (100.5, "Hello world"),
        (100.8, "Hello world!"),
    ]:
        now[0] = at
        await streamer(text)
    assert [d["text"] for d in tg.drafts[before:]] == ["Hello wor", "Hello world!"]
    assert streamer.sent == 2


async def test_sending_an_answer_with_a_spaced_heading_never_holds_the_loop(
    outbox: TelegramOutbox,
) -> None:
    """An answer is rendered to HTML on the event loop, to split it and to send it: a heading
    line with a run of spaces in a 1.5 KB answer held the loop for seconds (cubic)."""
    answer = "# x" + " " * 1_500 + "y"
    async with heartbeat() as beat:
        for chunk in outbox.split(answer):  # as chat.delivery.deliver_text does
            await outbox.send_text(CHAT, chunk)
    assert beat.largest < LIMIT, f"the loop was held {beat.largest:.1f} s"
