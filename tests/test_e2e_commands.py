"""End to end: chat commands through `agentd run`. One daemon; each test its own chat.

Commands never reach the model: every test checks the model saw nothing from them.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.daemon_process import Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

USERS = list(range(200, 230))
STRANGER = 999
CONFIG = """
[tools]
plugins = ["tests.plugins.e2e_tools"]
approval_timeout = 60
"""


class Stack:
    def __init__(
        self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon, notify: socket.socket
    ) -> None:
        self.tg, self.llm, self.daemon, self.notify = tg, llm, daemon, notify
        self._users = iter(USERS)

    def user(self) -> int:
        return next(self._users)

    def sent(self, chat: int) -> list[dict[str, Any]]:
        return [m for m in self.tg.sent if m["chat_id"] == chat]

    def wait_sent(self, chat: int, n: int, timeout: float = 30) -> list[dict[str, Any]]:
        return self.tg.wait_until(
            lambda: (s := self.sent(chat)) and len(s) >= n and s, timeout, f"{n} messages to {chat}"
        )

    def requests_for(self, user: int) -> list[dict[str, Any]]:
        return [r for r in self.llm.requests if f"u{user}:" in str(r["body"]["messages"])]

    def command(self, user: int, text: str, n: int) -> str:
        """Send a command; return the text of the n-th message the chat has received."""
        before = len(self.llm.requests)
        self.tg.add_message(user, user, text)
        reply = self.wait_sent(user, n)[n - 1]["plain_text"]
        assert len(self.llm.requests) == before or all(
            text not in str(r["body"]) for r in self.llm.requests[before:]
        ), "a command reached the model"
        return reply


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("commands")
    (tmp / "agentd.toml").write_text(CONFIG)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # what systemd listens on
    notify.bind(str(tmp / "notify.sock"))
    notify.settimeout(10)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm, notify:
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_ACCESS__ALLOWED_USER_IDS=str(USERS),
            AGENTD_ACCESS__APPROVERS=str(USERS),  # own cards
            NOTIFY_SOCKET=str(tmp / "notify.sock"),
            WATCHDOG_USEC=str(120_000_000),
        )
        daemon = Daemon(tmp, env).start(timeout=120)  # a slow start is contention, not a bug
        try:
            yield Stack(tg, llm, daemon, notify)
        finally:
            daemon.stop()


def script(stack: Stack, user: int, *replies: Any) -> None:
    """Answer this user's turns with the given replies, in order, whatever else is going on."""
    queue = list(replies)
    previous = stack.llm._responder

    def responder(body: dict[str, Any]) -> Any:
        if f"u{user}:" in str(body["messages"]) and queue:
            return queue.pop(0)
        return previous(body) if previous else None

    stack.llm.set_responder(responder)


def test_the_menu_is_registered_at_start(stack: Stack) -> None:
    # Published by a background task at start (best effort): it may land just after "ready".
    commands = stack.tg.wait_until(lambda: stack.tg.commands, timeout=10, what="setMyCommands")
    names = [c["command"] for c in commands]
    assert names[:5] == ["help", "new", "stop", "status", "usage"]
    # Then the capabilities' own, in the order of their list: memory's first.
    assert names.index("memory") < names.index("reminders") < names.index("skills")
    assert all(c["description"] for c in stack.tg.commands)


def test_the_watchdog_follows_the_poll_loop(stack: Stack) -> None:
    # The human "starting" line is for terminals only (tests/test_startup.py checks both cases).
    # WatchdogSec=120 s: a timer would ping every 60 s; the poll loop (1 s polls) pings now.
    received = []
    deadline = time.monotonic() + 10
    # The poller starts (and pings) before READY=1, which waits for the model library.
    while not {"READY=1", "WATCHDOG=1"} <= set(received) and time.monotonic() < deadline:
        received.append(stack.notify.recv(64).decode())
    assert "READY=1" in received and "WATCHDOG=1" in received


def test_help_lists_the_commands_and_costs_nothing(stack: Stack) -> None:
    user = stack.user()
    reply = stack.command(user, "/help", 1)
    for name in ("/new", "/stop", "/status", "/usage", "/memory"):
        assert name in reply
    rows = stack.daemon.query("SELECT COUNT(*) FROM llm_usage WHERE chat_id = ?", (user,))
    assert rows[0][0] == 0
    audit = stack.tg.wait_until(
        lambda: stack.daemon.query(
            "SELECT detail FROM audit WHERE kind = 'command' AND chat_id = ?", (user,)
        ),
        20,
        "the command audited",
    )
    assert '"help"' in audit[0][0]


def test_help_says_what_i_can_do_and_shows_run_to_the_owner_only(stack: Stack) -> None:
    owner, other = USERS[0], USERS[-1]  # the owner: the first of allowed_user_ids
    reply = stack.command(other, "/help", len(stack.sent(other)) + 1)
    assert "What I can do:" in reply and "remember what you tell me" in reply
    assert "/run" not in reply and "/memory" in reply
    mine = stack.command(owner, "/help", len(stack.sent(owner)) + 1)
    assert "/run" in mine and "What I can do:" in mine
    # Telegram's menu likewise: /run in the owner's private chat only.
    menus = stack.tg.wait_until(
        lambda: len(stack.tg.command_scopes) >= 2 and stack.tg.command_scopes,
        10,
        "both menus",
    )
    everyone = [c["command"] for c in menus[None]]
    owners_menu = next(v for k, v in menus.items() if k and str(owner) in k)
    assert "run" not in everyone and "run" in [c["command"] for c in owners_menu]


def test_unknown_command_gets_a_hint_and_a_path_is_text(stack: Stack) -> None:
    user = stack.user()
    assert "/help" in stack.command(user, "/frobnicate now", 1)
    stack.tg.add_message(user, user, f"/etc/hosts u{user}: what is this file?")
    assert stack.wait_sent(user, 2)[1]["plain_text"].startswith("echo:")


def test_a_stranger_gets_nothing(stack: Stack) -> None:
    update = stack.tg.add_message(STRANGER, STRANGER, "/help")
    stack.tg.wait_until(lambda: stack.tg.confirmed_offset > update, 20, "the update acknowledged")
    assert stack.sent(STRANGER) == []
    rows = stack.daemon.query("SELECT outcome FROM updates WHERE update_id = ?", (update,))
    assert rows[0][0] == "reject"


def test_new_cuts_the_history_sent_to_the_model_but_deletes_nothing(stack: Stack) -> None:
    user = stack.user()
    stack.tg.add_message(user, user, f"u{user}: my cat is called Tom")
    stack.wait_sent(user, 1)
    assert "Fresh start" in stack.command(user, "/new", 2)
    stack.tg.add_message(user, user, f"u{user}: what is my cat called?")
    stack.wait_sent(user, 3)
    last = stack.requests_for(user)[-1]["body"]["messages"]
    assert "Tom" not in str(last)
    history = stack.daemon.cli_json("history", "--chat", str(user))
    assert any("Tom" in m["content"] for m in history)


def test_stop_during_a_model_call(stack: Stack) -> None:
    user = stack.user()
    stack.llm.hold()
    try:
        stack.tg.add_message(user, user, f"u{user}: write a very long essay")
        stack.llm.wait_for_held(1, timeout=30)
        reply = stack.command(user, "/stop", 1)
    finally:
        stack.llm.release()
    assert "Stopped working on" in reply and "very long essay" in reply
    # The cancel reaches the running task just after the reply is sent.
    rows = stack.tg.wait_until(
        lambda: (
            [
                r[0]
                for r in stack.daemon.query(
                    "SELECT status FROM workflow_instances WHERE key = ? AND workflow = 'turn'",
                    (f"chat-{user}",),
                )
            ]
            == ["cancelled"]
            or None
        ),
        timeout=10,
    )
    assert rows
    # The user's message is kept; the cancelled turn never answers.
    history = stack.daemon.cli_json("history", "--chat", str(user))
    assert [m["role"] for m in history] == ["user"]
    assert "Nothing is running" in stack.command(user, "/stop", 2)


def test_stop_during_an_approval_wait(stack: Stack) -> None:
    user = stack.user()
    use = [
        {
            "type": "tool_use",
            "id": "toolu_stop1",
            "name": "delete_file",
            "input": {"path": f"/tmp/x{user}"},
        }
    ]
    script(stack, user, use, "should never be said")
    stack.tg.add_message(user, user, f"u{user}: delete that file")
    card = stack.tg.wait_until(
        lambda: next((m for m in stack.sent(user) if m["reply_markup"]), None), 30, "a card"
    )
    reply = stack.command(user, "/stop", 2)
    assert "delete_file" in reply and "not run" in reply
    edit = stack.tg.wait_until(
        lambda: next((e for e in stack.tg.edits if e["message_id"] == card["message_id"]), None),
        20,
        "the card edited",
    )
    assert "Stopped" in edit["plain_text"] and not edit.get("reply_markup")
    rows = stack.daemon.query("SELECT status, decided_by FROM approvals WHERE chat_id = ?", (user,))
    assert tuple(rows[0]) == ("denied", "stop")
    # A late press finds it settled and runs nothing.
    buttons = card["reply_markup"]["inline_keyboard"][0]
    stack.tg.add_callback_query(user, user, card["message_id"], buttons[0]["callback_data"])
    stack.tg.wait_until(
        lambda: (
            len(stack.tg.callback_answers)
            and any("Already decided" in (a.get("text") or "") for a in stack.tg.callback_answers)
        ),
        20,
        "the press answered",
    )
    assert not any(e.startswith(f"delete_file /tmp/x{user}") for e in stack.daemon.effects())
    status = stack.daemon.query(
        "SELECT status FROM workflow_instances WHERE key = ? AND workflow = 'turn'",
        (f"chat-{user}",),
    )
    assert [r[0] for r in status] == ["cancelled"]


def test_status_and_usage_show_todays_tokens(stack: Stack) -> None:
    user = stack.user()
    stack.tg.add_message(user, user, f"u{user}: hello")
    stack.wait_sent(user, 1)
    status = stack.command(user, "/status", 2)
    assert "claude-haiku-4-5" in status and "Up:" in status and "Queue:" in status
    assert "Waiting for approval:" in status and "model calls" in status
    usage = stack.command(user, "/usage", 3)
    assert "Today (UTC): 1 model calls" in usage and "≈ $" in usage


def test_memory_lists_memories_with_forget_buttons(stack: Stack) -> None:
    user = stack.user()
    use = [
        {
            "type": "tool_use",
            "id": "toolu_mem1",
            "name": "remember",
            "input": {"kind": "preference", "content": "likes green tea"},
        }
    ]
    script(stack, user, use, "Noted.")
    stack.tg.add_message(user, user, f"u{user}: I like green tea")
    stack.wait_sent(user, 1)
    stack.tg.add_message(user, user, "/memory")
    listing = stack.wait_sent(user, 2)[1]
    assert "likes green tea" in listing["plain_text"] and "noted by me" in listing["plain_text"]
    forget = listing["reply_markup"]["inline_keyboard"][0][1]
    assert forget["text"].startswith("🗑") and forget["callback_data"].startswith("mem:forget:")
    stack.tg.add_callback_query(user, user, listing["message_id"], forget["callback_data"])
    assert stack.wait_sent(user, 3)[2]["plain_text"].startswith("Forgot #")
    assert "don't remember anything" in stack.command(user, "/memory", 4)
    rows = stack.daemon.query("SELECT COUNT(*) FROM memories WHERE user_id = ?", (user,))
    assert rows[0][0] == 0
    kept = stack.daemon.query(
        "SELECT action FROM memory_versions WHERE user_id = ? ORDER BY version", (user,)
    )
    assert [r[0] for r in kept][-1] == "forget"  # versioned: `agentd memory restore` can undo


def pair_code(stack: Stack) -> str:
    return stack.daemon.cli_json("pair", "--no-wait")["code"]


def wait_audit(stack: Stack, kind: str, user: int) -> list[Any]:
    return stack.tg.wait_until(
        lambda: stack.daemon.query(
            "SELECT detail FROM audit WHERE kind = ? AND user_id = ?", (kind, user)
        ),
        20,
        f"{kind} audited",
    )


def test_pairing_right_wrong_expired_and_used_codes(stack: Stack) -> None:
    from agentd.access import pairing
    from agentd.db import open_sync

    newcomer, guesser, late, thief = 300, 301, 302, 303
    stack.tg.add_message(guesser, guesser, "/start WRNG-CODE")
    assert '"wrong"' in wait_audit(stack, "pairing_failed", guesser)[0][0]

    conn = open_sync(stack.daemon.db_path)
    try:  # a code made an hour ago with a ten-minute life: the clock is injected
        expired = pairing.new_code(conn, ttl=600, created_by="test", now=time.time() - 3600)
    finally:
        conn.close()
    stack.tg.add_message(late, late, f"/start {expired}")
    assert '"expired"' in wait_audit(stack, "pairing_failed", late)[0][0]

    code = pair_code(stack)
    stack.tg.add_message(newcomer, newcomer, f"/start {code.lower()}")
    assert "You're paired" in stack.wait_sent(newcomer, 1)[0]["plain_text"]
    # Codes are kept only as their sha256: the /start command's journaled input included.
    assert (
        stack.daemon.cells_holding(code) == stack.daemon.cells_holding(code.replace("-", "")) == []
    )
    stack.tg.add_message(thief, thief, f"/start {code}")  # single use
    assert '"used"' in wait_audit(stack, "pairing_failed", thief)[0][0]
    stack.tg.add_message(newcomer, newcomer, f"u{newcomer}: hello, am I served?")
    assert stack.wait_sent(newcomer, 2)[1]["plain_text"].startswith("echo:")
    assert stack.sent(guesser) == stack.sent(late) == stack.sent(thief) == []

    listed = stack.daemon.cli_json("users", "ls")
    assert {"user_id": newcomer, "source": "paired"}.items() <= next(
        u for u in listed if u["user_id"] == newcomer
    ).items()
    assert stack.daemon.cli("users", "rm", str(newcomer)).returncode == 0
    assert stack.daemon.cli("users", "rm", str(newcomer)).returncode == 1
    update = stack.tg.add_message(newcomer, newcomer, f"u{newcomer}: still there?")
    stack.tg.wait_until(lambda: stack.tg.confirmed_offset > update, 20, "acknowledged")
    rows = stack.daemon.query("SELECT outcome FROM updates WHERE update_id = ?", (update,))
    assert rows[0][0] == "reject" and len(stack.sent(newcomer)) == 2


def test_a_code_sent_by_an_account_already_served_is_not_kept(stack: Stack) -> None:
    # Not redeemed (a served account is not linked to someone else), so the code stays valid
    # until it expires: the database must not hold it.
    user, other = stack.user(), stack.user()
    code = stack.daemon.cli_json("pair", "--no-wait", "--link", str(other))["code"]
    reply = stack.command(user, f"/start {code}", 1)
    assert reply.startswith("Hello!") and "paired" not in reply
    stack.daemon.wait_idle(timeout=30)
    assert (
        stack.daemon.cells_holding(code) == stack.daemon.cells_holding(code.replace("-", "")) == []
    )
    rows = stack.daemon.query(
        "SELECT input FROM workflow_instances WHERE workflow = 'command' AND input LIKE ?",
        (f'%"user_id":{user}%',),
    )
    assert rows and '"name":"start"' in rows[0][0]
