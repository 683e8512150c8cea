"""The owner's private chat with a running daemon, for end-to-end tests: the fakes and the
daemon started and stopped together, and what every such test does (read what the owner was
sent, send a message as the owner)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

S = TypeVar("S", bound="OwnerChat")


class OwnerChat:
    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon) -> None:
        self.tg, self.llm, self.daemon = tg, llm, daemon

    def sent(self) -> list[dict[str, Any]]:
        return [m for m in self.tg.sent if m["chat_id"] == OWNER]

    def ask(self, text: str) -> int:
        """Send `text` as the owner; its message id once the fake has it."""
        self.tg.add_message(OWNER, OWNER, text)
        return self.tg.wait_until(
            lambda: next(
                (m["message_id"] for m in self.tg.chat_history(OWNER) if m.get("text") == text),
                None,
            ),
            10,
            f"the message {text!r}",
        )


@contextmanager
def owner_chat_running(
    tmp: Path,
    config: str,
    make: Callable[[FakeTelegram, FakeAnthropic, Daemon], S],
    *,
    users_in_config: bool = False,
) -> Iterator[S]:
    """A daemon on `config` (agentd.toml's text) against fresh fakes, without streaming.
    `users_in_config`: the file's [access] says who may talk, not the test environment's."""
    (tmp / "agentd.toml").write_text(config)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_CHAT__STREAMING="false",
        )
        if users_in_config:
            del env["AGENTD_ACCESS__ALLOWED_USER_IDS"]
            tg.add_chat(OWNER, "private", OWNER)
        with running_daemon(tmp, env) as daemon:
            yield make(tg, llm, daemon)
