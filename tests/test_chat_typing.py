"""The channel-neutral "typing…" renewal: not shown for a quick answer, renewed while a slow
one runs, cleared after, and stopped with the body even when the body fails."""

from __future__ import annotations

import asyncio

import pytest

from agentd.chat.typing import typing_while


class Indicator:
    def __init__(self, wanted: int = 0) -> None:
        self.sent = 0
        self.cleared = 0
        self.wanted = wanted
        self.enough = asyncio.Event()

    async def send(self) -> None:
        self.sent += 1
        if self.sent >= self.wanted:
            self.enough.set()

    async def clear(self) -> None:
        self.cleared += 1


def renewing() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


async def test_a_quick_answer_shows_no_indicator() -> None:
    shown = Indicator()
    async with typing_while(shown.send, every=0.01, delay=60, clear=shown.clear):
        await asyncio.sleep(0)
    assert (shown.sent, shown.cleared) == (0, 0)


async def test_a_slow_answer_renews_it_and_clears_it_once() -> None:
    shown = Indicator(wanted=3)
    async with typing_while(shown.send, every=0.01, delay=0.01, clear=shown.clear):
        await asyncio.wait_for(shown.enough.wait(), 10)
    assert shown.sent >= 3 and shown.cleared == 1
    assert not renewing()  # the renewal stopped with the body: nothing sends after it


async def test_no_delay_shows_it_at_once_and_a_failing_body_stops_it() -> None:
    shown = Indicator(wanted=1)
    with pytest.raises(RuntimeError):
        async with typing_while(shown.send, every=60):
            await asyncio.wait_for(shown.enough.wait(), 10)
            raise RuntimeError("the turn failed")
    assert shown.sent == 1 and not renewing()
