"""End to end: a conversation through `agentd run` reads its prompt from the cache (R-LLM-4)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import OWNER, Daemon, daemon_env, poll, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram


@pytest.fixture
def fakes() -> Iterator[tuple[FakeTelegram, FakeAnthropic]]:
    # A 1,024-token minimum (Sonnet 4.5's): agentd's stable prefix alone is cacheable.
    with FakeTelegram.running() as tg, FakeAnthropic.running(cache_min_tokens=1024) as llm:
        yield tg, llm


def answers(daemon: Daemon) -> int:
    return daemon.query("SELECT COUNT(*) FROM messages WHERE role = 'assistant'")[0][0]


def say(tg: FakeTelegram, daemon: Daemon, text: str) -> None:
    """One turn, until its answer is stored (its model calls' usage is recorded before)."""
    before = answers(daemon)
    tg.add_message(OWNER, OWNER, text)
    poll(lambda: answers(daemon) != before, 30, f"an answer to {text!r}")


def turn_usage(daemon: Daemon) -> list[tuple[str, int, int]]:
    """(step, cache read, cache write) of every turn call, oldest first."""
    rows = daemon.query(
        "SELECT step, cache_read_tokens, cache_write_tokens FROM llm_usage "
        "WHERE purpose = 'turn' ORDER BY id"
    )
    return [(r[0], r[1], r[2]) for r in rows]


def test_a_conversation_reads_its_prefix_from_the_cache(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    env = daemon_env(tmp_path, tg.base_url, llm.base_url)
    llm.enqueue_tool_use(
        "remember",
        {"kind": "preference", "key": "drink", "content": "Likes oolong tea"},
        "toolu_rem",
    )
    llm.enqueue_text("Noted: oolong tea.")
    with running_daemon(tmp_path, env) as daemon:
        say(tg, daemon, "I like oolong tea, remember that")
        say(tg, daemon, "what should I drink this afternoon?")
        say(tg, daemon, "and tomorrow morning?")
        (_, r1, w1), (step2, r2, w2), (_, r3, _), (_, r4, _) = turn_usage(daemon)
        assert r1 == 0 and w1 > 1024  # the first call writes tools + system
        assert step2 == "llm#2" and r2 == w1 and w2 > 0  # the tool loop reads it, writes more
        assert r3 == w1  # the second turn reads the stable prefix…
        assert r4 > r3  # …and the third the history too
        first, third = llm.requests[2]["body"], llm.requests[3]["body"]
        assert first["system"] == third["system"] and first["tools"] == third["tools"]
        # What changes per call is still right, at the end of the newest message.
        context = third["messages"][-1]["content"][-1]["text"]
        sent_at = datetime.fromtimestamp(llm.requests[3]["time"], UTC)
        minutes = {
            sent_at.strftime("%Y-%m-%dT%H:%M"),
            datetime.fromtimestamp(llm.requests[3]["time"] - 60, UTC).strftime("%Y-%m-%dT%H:%M"),
        }
        assert any(f"Current date and time: {m}+00:00" in context for m in minutes)
        assert re.search(r"<data>\n[^<]*Likes oolong tea[^<]*\n</data>", context)  # R-SP-2
        assert third["messages"][-1]["content"][0]["text"] == "and tomorrow morning?"


@pytest.mark.parametrize(
    "change",
    [
        {"AGENTD_AGENT__PERSONA": "You are terse and formal."},  # the system prompt
        {"AGENTD_TOOLS__DISABLED": '["fetch_url"]'},
    ],  # the tools, first in the prefix
    ids=["persona", "tools"],
)
def test_a_changed_persona_or_tool_set_is_not_read_from_the_cache(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic], change: dict[str, str]
) -> None:
    tg, llm = fakes
    env = daemon_env(tmp_path, tg.base_url, llm.base_url)
    with running_daemon(tmp_path, env) as daemon:
        say(tg, daemon, "hello")
        say(tg, daemon, "still there?")
        assert turn_usage(daemon)[-1][1] > 1024  # cached as long as nothing changes
    with running_daemon(tmp_path, env | change) as daemon:
        say(tg, daemon, "hello again")
        assert turn_usage(daemon)[-1][1] == 0
        say(tg, daemon, "and now?")
        assert turn_usage(daemon)[-1][1] > 1024  # the new prefix is cached in turn


def turn_bodies(llm: FakeAnthropic) -> list[dict[str, Any]]:
    return [r["body"] for r in llm.requests if not r["body"].get("tool_choice")]


def history_sent(body: dict[str, Any]) -> list[str]:
    """The texts of the history a turn's first call sent (everything before the newest message)."""
    return [m["content"][0]["text"] for m in body["messages"][:-1]]


def test_the_window_holds_still_while_warm_and_is_cut_after_a_long_pause(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    # Sonnet 4.5: agentd's rule then knows the same 1,024-token minimum the fake applies.
    env = daemon_env(
        tmp_path,
        tg.base_url,
        llm.base_url,
        AGENTD_MEMORY__HISTORY_LIMIT="4",
        AGENTD_MEMORY__HISTORY_STEP="6",
        AGENTD_LLM__MODEL="claude-sonnet-4-5",
    )
    with running_daemon(tmp_path, env) as daemon:
        for n in range(1, 5):
            say(tg, daemon, f"message {n}")
        bodies = turn_bodies(llm)
        assert [len(history_sent(b)) for b in bodies] == [0, 2, 4, 6]  # it grows, never slides
        assert all(history_sent(b)[0] == "message 1" for b in bodies[1:])
        read_warm = turn_usage(daemon)[-1][1]
        daemon.age_messages(7200)  # two hours pass: the 1-hour cache entries have expired
        llm.cache.advance(7200)
        say(tg, daemon, "message 5")
        cold = turn_bodies(llm)[-1]
        assert history_sent(cold)[0] == "message 3"  # cut to the newest 4, for free
        _, read, write = turn_usage(daemon)[-1]
        assert read == 0 and write > 1024 and read_warm > 1024  # all of it is written again
        say(tg, daemon, "message 6")
        assert history_sent(turn_bodies(llm)[-1])[0] == "message 3"
        assert turn_usage(daemon)[-1][1] >= write  # the cut prefix is read back
