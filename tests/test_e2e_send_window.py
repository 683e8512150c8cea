"""The one send path (chat/delivery.py), end to end: for every kind of message agentd sends,
`agentd run` is killed (kill -9) after Telegram took the message and before its answer came
back, then restarted. The user sees it once, or twice with one `send_uncertain` audit row:
never a duplicate nobody counted (docs/messages.md, "Exactly once, counted")."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.daemon_process import Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

USERS = list(range(500, 520))
CONFIG = """
[tools]
plugins = ["tests.plugins.e2e_tools", "tests.plugins.media_tools"]
approval_timeout = 120

[schedule]
min_interval = 1
on_time_window = 0.5
max_grace = 120
"""
HANG = 600.0  # the fake holds the answer far longer than any test runs


class Stack:
    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon) -> None:
        self.tg, self.llm, self.daemon = tg, llm, daemon
        self._users = iter(USERS)
        self.scripts: dict[str, Callable[[dict[str, Any]], Any]] = {}
        llm.set_responder(self._respond)

    def _respond(self, body: dict[str, Any]) -> Any:
        text = json.dumps(body["messages"])
        for marker, script in self.scripts.items():
            if marker in text:
                return script(body)
        return None  # echo

    def user(self) -> int:
        user = next(self._users)
        self.tg.add_chat(user)
        return user

    def texts(self, chat: int) -> list[str]:
        return [m["plain_text"] for m in self.tg.sent if m["chat_id"] == chat]

    def files(self, chat: int) -> list[dict[str, Any]]:
        return [d for d in self.tg.documents if d["chat_id"] == chat]

    def counted(self, chat: int) -> list[dict[str, Any]]:
        rows = self.daemon.query(
            "SELECT detail FROM audit WHERE kind = 'send_uncertain' AND chat_id = ?", (chat,)
        )
        return [json.loads(r[0]) for r in rows]

    def kill_in_window(self, method: str, landed: Callable[[], Any], what: str) -> None:
        """Wait for the held send to land, kill -9 the daemon, start it again."""
        self.tg.wait_until(landed, 60, what)
        self.daemon.kill9()
        self.daemon.start()

    def wait(self, pred: Callable[[], Any], what: str, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while not (value := pred()):
            assert time.monotonic() < deadline, f"{what}\n{self.daemon.log()[-4000:]}"
            time.sleep(0.05)
        return value


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("send-window")
    (tmp / "agentd.toml").write_text(CONFIG)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        # The users the tests take approve their own calls (access.approvers), so their card
        # lands in their own chat; the last user is not one: their card goes to the owner.
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_ACCESS__ALLOWED_USER_IDS=str(USERS),
            AGENTD_ACCESS__APPROVERS=str(USERS[:-1]),
        )
        with running_daemon(tmp, env) as daemon:
            yield Stack(tg, llm, daemon)


def assert_once_or_counted(s: Stack, chat: int, seen: list[Any], method: str) -> None:
    """The kill came after the message landed, so it is re-sent once, and that is counted."""
    counted = s.counted(chat)
    assert len(seen) == 2, seen
    assert len(counted) == len(seen) - 1, counted
    assert counted[0]["method"] == method


def test_a_turn_reply(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.tg.fail_next("sendMessage", mode="land", delay=HANG)
    s.tg.add_message(chat, chat, "hello there")
    s.kill_in_window("sendMessage", lambda: s.texts(chat), "the reply landed")
    seen = s.wait(lambda: len(s.texts(chat)) >= 2 and s.texts(chat), "the reply re-sent")
    assert seen == ["echo: hello there"] * 2
    assert_once_or_counted(s, chat, seen, "sendMessage")
    rows = s.wait(
        lambda: s.daemon.query(
            "SELECT role FROM messages WHERE chat_id = ? AND role = 'assistant'", (chat,)
        ),
        "the reply recorded",
    )
    assert len(rows) == 1


def test_a_command_reply(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.tg.fail_next("sendMessage", mode="land", delay=HANG)
    s.tg.add_message(chat, chat, "/help")
    s.kill_in_window("sendMessage", lambda: s.texts(chat), "the /help reply landed")
    seen = s.wait(lambda: len(s.texts(chat)) >= 2 and s.texts(chat), "the reply re-sent")
    assert seen[0] == seen[1] and "/stop" in seen[0]
    assert_once_or_counted(s, chat, seen, "sendMessage")


def test_a_reminder(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.tg.fail_next("sendMessage", mode="land", delay=HANG)
    sched = s.daemon.cli_json(
        "schedule", "add", "--user", str(chat), "--message", "stretch", "--after", "2s"
    )
    s.kill_in_window("sendMessage", lambda: s.texts(chat), "the reminder landed")
    seen = s.wait(lambda: len(s.texts(chat)) >= 2 and s.texts(chat), "the reminder re-sent")
    assert seen == ["stretch", "stretch"]
    assert_once_or_counted(s, chat, seen, "sendMessage")
    runs = s.wait(
        lambda: s.daemon.query(
            "SELECT outcome FROM schedule_runs WHERE schedule_id = ?", (sched["id"],)
        ),
        "the run recorded",
    )
    assert [r[0] for r in runs] == ["sent"]


def test_a_scheduled_prompt_result(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.scripts[f"u{chat}:"] = lambda body: "Your daily summary: all quiet."
    s.tg.fail_next("sendMessage", mode="land", delay=HANG)
    s.daemon.cli_json(
        "schedule",
        "add",
        "--user",
        str(chat),
        "--prompt",
        f"u{chat}: summarise my day",
        "--after",
        "2s",
    )
    s.kill_in_window("sendMessage", lambda: s.texts(chat), "the prompt's result landed")
    seen = s.wait(lambda: len(s.texts(chat)) >= 2 and s.texts(chat), "the result re-sent")
    assert seen == ["Your daily summary: all quiet."] * 2
    assert_once_or_counted(s, chat, seen, "sendMessage")


def test_an_approval_card(stack: Stack) -> None:
    s, chat = stack, stack.user()
    target = f"/tmp/agentd-window-{chat}"

    def script(body: dict[str, Any]) -> Any:
        if "tool_result" in json.dumps(body["messages"][-1]):
            return "Deleted it."
        return [
            {
                "type": "tool_use",
                "id": f"toolu_w{chat}",
                "name": "delete_file",
                "input": {"path": target},
            }
        ]

    s.scripts[f"u{chat}:"] = script
    s.tg.fail_next("sendMessage", mode="land", delay=HANG)
    s.tg.add_message(chat, chat, f"u{chat}: delete {target}")
    cards = lambda: [m for m in s.tg.sent if m["chat_id"] == chat and m["reply_markup"]]  # noqa: E731
    s.kill_in_window("sendMessage", cards, "the approval card landed")
    both = s.wait(lambda: len(cards()) >= 2 and cards(), "the card re-sent")
    assert_once_or_counted(s, chat, both, "sendMessage")
    approve = both[-1]["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    s.tg.add_callback_query(chat, chat, both[-1]["message_id"], approve)
    s.wait(lambda: "Deleted it." in s.texts(chat), "the answer after approval")
    assert s.daemon.effects().count(f"delete_file {target}") == 1


def test_a_card_for_someone_elses_call(stack: Stack) -> None:
    """Not an approver: the asker is told first, then the card goes to the owner's chat, each
    through the one send path (the notice is the send killed here)."""
    s, owner, chat = stack, USERS[0], USERS[-1]
    s.tg.add_chat(owner)
    s.tg.add_chat(chat)
    target = f"/tmp/agentd-window-{chat}"

    def script(body: dict[str, Any]) -> Any:
        if "tool_result" in json.dumps(body["messages"][-1]):
            return "Deleted it."
        return [
            {
                "type": "tool_use",
                "id": f"toolu_o{chat}",
                "name": "delete_file",
                "input": {"path": target},
            }
        ]

    s.scripts[f"u{chat}:"] = script
    s.tg.fail_next("sendMessage", mode="land", delay=HANG)
    s.tg.add_message(chat, chat, f"u{chat}: delete {target}")
    s.kill_in_window("sendMessage", lambda: s.texts(chat), "the asker's notice landed")
    notices = s.wait(lambda: len(s.texts(chat)) >= 2 and s.texts(chat), "the notice re-sent")
    assert notices[0] == notices[1] and "needs the owner's approval" in notices[0], notices
    assert_once_or_counted(s, chat, notices, "sendMessage")
    cards = lambda: [m for m in s.tg.sent if m["chat_id"] == owner and m["reply_markup"]]  # noqa: E731
    card = s.wait(cards, "the card in the owner's chat")[-1]
    assert f"user {chat}" in card["plain_text"] and "delete_file" in card["plain_text"]
    approve = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    s.tg.add_callback_query(owner, owner, card["message_id"], approve)
    s.wait(lambda: "Deleted it." in s.texts(chat), "the answer after approval")
    assert len(cards()) == 1  # the card itself was sent once
    assert s.daemon.effects().count(f"delete_file {target}") == 1


def test_a_notice(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.tg.fail_next("sendMessage", mode="land", delay=HANG)
    s.tg.add_sticker(chat, chat)
    s.kill_in_window("sendMessage", lambda: s.texts(chat), "the notice landed")
    seen = s.wait(lambda: len(s.texts(chat)) >= 2 and s.texts(chat), "the notice re-sent")
    assert seen[0] == seen[1]
    assert_once_or_counted(s, chat, seen, "sendMessage")


def test_a_file(stack: Stack) -> None:
    s, chat = stack, stack.user()

    def script(body: dict[str, Any]) -> Any:
        if "tool_result" in json.dumps(body["messages"][-1]):
            return "Here is the report."
        return [
            {
                "type": "tool_use",
                "id": f"toolu_f{chat}",
                "name": "weekly_report",
                "input": {"week": 3},
            }
        ]

    s.scripts[f"u{chat}:"] = script
    s.tg.fail_next("sendDocument", mode="land", delay=HANG)
    s.tg.add_message(chat, chat, f"u{chat}: the weekly report please")
    s.kill_in_window("sendDocument", lambda: s.files(chat), "the file landed")
    files = s.wait(lambda: len(s.files(chat)) >= 2 and s.files(chat), "the file re-sent")
    assert {f["file_name"] for f in files} == {"report-week-3.csv"}
    assert_once_or_counted(s, chat, files, "sendDocument")
    assert s.texts(chat) == ["Here is the report."]  # the text answer was sent before, once
