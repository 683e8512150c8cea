"""End to end: /stop and edited messages keep their promises (docs/messages.md, "Stopping and
editing").

A stopped request never reaches the model again; an edit with the same text starts nothing; an
edit of a message still being worked on replaces it; an edit after the answer is a correction.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.daemon_process import Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

USERS = list(range(600, 620))
CONFIG = """
[tools]
plugins = ["tests.plugins.e2e_tools"]
"""


class Stack:
    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon) -> None:
        self.tg, self.llm, self.daemon = tg, llm, daemon
        self._users = iter(USERS)

    def user(self) -> int:
        return next(self._users)

    def texts(self, chat: int) -> list[str]:
        return [m["plain_text"] for m in self.tg.sent if m["chat_id"] == chat]

    def wait_texts(self, chat: int, n: int) -> list[str]:
        return self.tg.wait_until(
            lambda: len(t := self.texts(chat)) >= n and t, 60, f"{n} messages to {chat}"
        )

    def requests_for(self, chat: int) -> list[str]:
        """Each model request of this chat, as JSON text."""
        bodies = [json.dumps(r["body"]["messages"]) for r in self.llm.requests]
        return [b for b in bodies if f"u{chat}:" in b]

    def message_id(self, chat: int, text: str) -> int:
        return next(
            m["message_id"]
            for m in self.tg.chat_history(chat)
            if m.get("text") == text and m["from"]["id"] == chat
        )

    def turns(self, chat: int) -> list[tuple[str, str]]:
        rows = self.daemon.query(
            "SELECT id, status FROM workflow_instances WHERE key = ? AND workflow = 'turn' "
            "ORDER BY seq",
            (f"chat-{chat}",),
        )
        return [(r[0], r[1]) for r in rows]

    def wait(self, pred: Callable[[], Any], what: str, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        while not (value := pred()):
            assert time.monotonic() < deadline, f"{what}\n{self.daemon.log()[-3000:]}"
            time.sleep(0.05)
        return value


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("stop-edit")
    (tmp / "agentd.toml").write_text(CONFIG)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_ACCESS__ALLOWED_USER_IDS=str(USERS),
            AGENTD_CHAT__STREAMING="false",
        )
        with running_daemon(tmp, env) as daemon:
            yield Stack(tg, llm, daemon)


def test_a_stopped_request_never_reaches_the_model_again(stack: Stack) -> None:
    s, chat = stack, stack.user()
    order = f"u{chat}: add a note saying STOPPED-TASK"

    def would_act(body: dict[str, Any]) -> Any:
        # A model that carries out any request it can see, as a real one likely would.
        if "STOPPED-TASK" in json.dumps(body["messages"]):
            return [
                {
                    "type": "tool_use",
                    "id": f"toolu_s{chat}",
                    "name": "add_note",
                    "input": {"text": "STOPPED-TASK"},
                }
            ]
        return None

    s.llm.set_responder(would_act)
    s.llm.hold()
    try:
        s.tg.add_message(chat, chat, order)
        s.llm.wait_for_held(1, timeout=60)
        s.tg.add_message(chat, chat, "/stop")
        assert "Stopped working on" in s.wait_texts(chat, 1)[0]
        s.wait(lambda: s.turns(chat) and s.turns(chat)[0][1] == "cancelled", "turn cancelled")
    finally:
        s.llm.release()
    s.tg.add_message(chat, chat, f"u{chat}: what's the weather like?")
    assert s.wait_texts(chat, 2)[1] == f"echo: u{chat}: what's the weather like?"
    last = s.requests_for(chat)[-1]
    assert "STOPPED-TASK" not in last
    assert not any("STOPPED-TASK" in e for e in s.daemon.effects())
    # Kept for the record: `agentd history` still shows what was asked, marked withdrawn.
    rows = s.daemon.query(
        "SELECT json_extract(meta, '$.withdrawn') FROM messages WHERE chat_id = ? AND content = ?",
        (chat, order),
    )
    assert [r[0] for r in rows] == ["stopped"]


def test_an_edit_that_changes_nothing_starts_nothing(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.llm.set_responder(None)
    s.tg.add_message(chat, chat, f"u{chat}: hello")
    s.wait_texts(chat, 1)
    s.wait(lambda: [t for t in s.turns(chat) if t[1] == "complete"], "first turn done")
    s.tg.add_edited_message(chat, chat, s.message_id(chat, f"u{chat}: hello"), f"u{chat}: hello")
    s.tg.add_message(chat, chat, f"u{chat}: next")
    assert s.wait_texts(chat, 2)[1] == f"echo: u{chat}: next"
    s.wait(
        lambda: len(s.turns(chat)) == 2 and all(t[1] == "complete" for t in s.turns(chat)),
        "second turn done",
    )
    assert len(s.requests_for(chat)) == 2
    outcomes = s.daemon.query(
        "SELECT outcome FROM updates WHERE chat_id = ? ORDER BY update_id", (chat,)
    )
    assert [r[0] for r in outcomes] == ["turn", "edit_unchanged", "turn"]


def test_an_edit_of_a_message_being_worked_on_replaces_it(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.llm.set_responder(None)
    first = f"u{chat}: book a table for four"
    s.llm.hold()
    try:
        s.tg.add_message(chat, chat, first)
        s.llm.wait_for_held(1, timeout=60)
        s.tg.add_edited_message(chat, chat, s.message_id(chat, first), f"u{chat}: for five")
        s.wait(lambda: s.turns(chat) and s.turns(chat)[0][1] == "cancelled", "old turn cancelled")
    finally:
        s.llm.release()
    assert s.wait_texts(chat, 1) == [f"echo: u{chat}: for five"]
    s.tg.add_message(chat, chat, f"u{chat}: thanks")
    assert s.wait_texts(chat, 2) == [f"echo: u{chat}: for five", f"echo: u{chat}: thanks"]
    s.wait(
        lambda: [t[1] for t in s.turns(chat)] == ["cancelled", "complete", "complete"],
        "one cancelled turn, two answered",
    )
    assert "table for four" not in s.requests_for(chat)[-1]  # the replaced text is gone
    assert "edited message" not in s.requests_for(chat)[-1]


def test_an_edit_after_the_answer_is_a_correction(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.llm.set_responder(None)
    s.tg.add_message(chat, chat, f"u{chat}: remind me at 5")
    s.wait_texts(chat, 1)
    s.wait(lambda: [t for t in s.turns(chat) if t[1] == "complete"], "first turn done")
    s.tg.add_edited_message(
        chat, chat, s.message_id(chat, f"u{chat}: remind me at 5"), f"u{chat}: remind me at 6"
    )
    second = s.wait_texts(chat, 2)[1]
    assert second.endswith(f"u{chat}: remind me at 6")
    last = json.loads(s.requests_for(chat)[-1])[-1]
    text = json.dumps(last)
    assert "correction" in text and "remind me at 5" in text and "remind me at 6" in text


def test_the_owners_message_in_a_group_is_ignored_with_a_reason(stack: Stack) -> None:
    """Groups are off by default (docs/messages.md, "Groups"): the owner's group message gets
    no answer, but a log line and an audit row say why, so it does not vanish without a trace."""
    s, chat = stack, stack.user()
    group = -1009876500000 - chat
    s.llm.set_responder(None)
    s.tg.add_message(group, chat, "@fake_bot hello everyone", chat_type="group")
    s.tg.add_message(chat, chat, f"u{chat}: and in private?")
    s.wait_texts(chat, 1)  # later than the group message: it was handled by now
    assert s.texts(group) == []
    rows = s.daemon.query(
        "SELECT user_id, detail FROM audit WHERE kind = 'message_ignored' AND chat_id = ?",
        (group,),
    )
    assert [(r[0], json.loads(r[1])["reason"]) for r in rows] == [
        (chat, "group chats are disabled")
    ]
    assert f'"chat_id": {group}' in s.daemon.log() and "message ignored" in s.daemon.log()


def test_start_with_a_bogus_code_does_not_claim_pairing(stack: Stack) -> None:
    s, chat = stack, stack.user()
    s.tg.add_message(chat, chat, "/start BOGUS123")
    reply = s.wait_texts(chat, 1)[0]
    assert reply.startswith("Hello!") and "paired" not in reply.lower()


def test_a_second_run_says_already_running_before_the_heavy_imports(stack: Stack) -> None:
    import subprocess
    import sys

    second = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agentd", "run"],
        env=stack.daemon.env,
        cwd=stack.daemon.tmp,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 3, second.stderr[-2000:]
    assert "already running" in second.stderr and f"pid {stack.daemon.proc.pid}" in second.stderr
    imported = [
        line.rsplit("|", 1)[-1].strip()
        for line in second.stderr.splitlines()
        if line.startswith("import time:")
    ]
    assert imported and not any(m.startswith(("aiogram", "anthropic")) for m in imported)
