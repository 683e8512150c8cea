"""One owner on two accounts, through `agentd run`: a second account linked with
`agentd pair --link` speaks as the owner (the owner's memory and rights), and a reminder goes
where the owner last wrote, exactly once.

Telegram is the one channel here; the second account stands for the owner's account on
another channel (a linked account is mapped to its user at intake, whatever the channel)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon_process import OWNER, Daemon, daemon_env, poll, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

SECOND = 555  # another account of the owner's


class Stack:
    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon) -> None:
        self.tg, self.llm, self.daemon = tg, llm, daemon

    def sent(self, chat: int) -> list[dict[str, Any]]:
        return [m for m in self.tg.sent if m["chat_id"] == chat]

    def wait_text(self, chat: int, part: str) -> dict[str, Any]:
        return self.tg.wait_until(
            lambda: next((m for m in self.sent(chat) if part in m["plain_text"]), None),
            20,
            f"{part!r} in chat {chat}",
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("one-owner")
    (tmp / "agentd.toml").write_text("[schedule]\nmin_interval = 1\n")
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_ACCESS__OWNER_ID=str(OWNER),
            AGENTD_CHAT__STREAMING="false",
        )
        tg.add_chat(OWNER)
        tg.add_chat(SECOND)
        with running_daemon(tmp, env) as daemon:
            yield Stack(tg, llm, daemon)


def test_a_linked_account_is_the_owner_and_notices_follow_them(stack: Stack) -> None:
    # Not served before it is linked: a stranger gets nothing.
    stack.tg.add_message(SECOND, SECOND, "hello?")
    poll(
        lambda: stack.daemon.query("SELECT 1 FROM audit WHERE kind = 'access_denied'"),
        20,
        "the stranger refused",
    )
    assert stack.sent(SECOND) == []
    code = stack.daemon.cli_json("pair", "--no-wait", "--link", str(OWNER))["code"]
    stack.tg.add_message(SECOND, SECOND, f"/start {code}")
    stack.wait_text(SECOND, "You're paired")
    listed = {u["user_id"]: u for u in stack.daemon.cli_json("users", "ls")}
    assert listed[OWNER]["accounts"] == [f"telegram:{SECOND}"] and SECOND not in listed

    # Its message is the owner's turn: the owner's id on the history, the owner's rights.
    stack.tg.add_message(SECOND, SECOND, "/status")
    stack.wait_text(SECOND, "Model:")  # the owner's /status, not a plain user's
    stack.llm.enqueue_text("Hello again.")
    stack.tg.add_message(SECOND, SECOND, "hi from my other account")
    stack.wait_text(SECOND, "Hello again.")
    users = stack.daemon.query(
        "SELECT DISTINCT user_id FROM messages WHERE chat_id = ? AND role = 'user'", (SECOND,)
    )
    assert [r[0] for r in users] == [OWNER]

    # A reminder for the owner goes where they last wrote: the second account, once.
    added = stack.daemon.cli_json(
        "schedule", "add", "--user", str(OWNER), "--message", "Water the plants", "--after", "1s"
    )
    stack.wait_text(SECOND, "Water the plants")
    poll(
        lambda: stack.daemon.query(
            "SELECT 1 FROM schedule_runs WHERE schedule_id = ? AND outcome = 'sent'",
            (added["id"],),
        ),
        20,
        "the run recorded",
    )
    everywhere = [m for m in stack.tg.sent if "Water the plants" in m["plain_text"]]
    assert [m["chat_id"] for m in everywhere] == [SECOND]

    # Back on the first account: the next notice follows the owner there.
    stack.llm.enqueue_text("Back here.")
    stack.tg.add_message(OWNER, OWNER, "and now from here")
    stack.wait_text(OWNER, "Back here.")
    stack.daemon.cli_json(
        "schedule", "add", "--user", str(OWNER), "--message", "Call mum", "--after", "1s"
    )
    stack.wait_text(OWNER, "Call mum")
    assert not [m for m in stack.sent(SECOND) if "Call mum" in m["plain_text"]]
