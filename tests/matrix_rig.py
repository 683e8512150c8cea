"""`agentd run` with Matrix on, against a real Synapse (through a window proxy) and the fakes
for Telegram and the model: what every Matrix end-to-end test starts from."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.daemon_process import Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.matrixserver import Cast, MatrixUser, WindowProxy, wait_for

CONFIG = """
[matrix]
homeserver = "{url}"
user_id = "{bot}"
owner = "{owner}"
sync_timeout = 1
{extra}
"""


class MatrixRig:
    def __init__(
        self, cast: Cast, proxy: WindowProxy, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon
    ) -> None:
        self.cast, self.proxy, self.tg, self.llm, self.daemon = cast, proxy, tg, llm, daemon
        self.owner = cast.owner
        self.bot = cast.bot_user_id

    def dm(self, user: MatrixUser | None = None) -> str:
        """A direct room of `user` (the owner) with the bot, once the bot joined it."""
        user = user or self.owner
        room = user.create_room(invite=[self.bot])
        wait_for(lambda: self.bot in user.joined_members(room), 60, "the bot joining the room")
        return room

    def bot_texts(self, room: str, user: MatrixUser | None = None) -> list[str]:
        """The bodies of the bot's messages in the room, as the server holds them (edits
        are events of their own and are left out)."""
        events = (user or self.owner).from_user(room, self.bot)
        return [
            str(e["content"].get("body"))
            for e in events
            if (e["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"
        ]

    def shown(self, room: str) -> list[str]:
        """The bot's messages as a client shows them: each with its newest edit applied."""
        events = self.owner.from_user(room, self.bot)
        latest: dict[str, str] = {}
        for e in events:
            relates = e["content"].get("m.relates_to") or {}
            if relates.get("rel_type") == "m.replace":
                latest[relates["event_id"]] = str(e["content"]["m.new_content"]["body"])
        return [
            latest.get(e["event_id"], str(e["content"].get("body")))
            for e in events
            if (e["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"
        ]

    def edits(self, room: str) -> int:
        events = self.owner.from_user(room, self.bot)
        return sum(
            (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.replace" for e in events
        )

    def wait_answer(self, room: str, text: str, timeout: float = 60) -> list[str]:
        """Wait for the bot's message `text` in the room; return all its messages there."""

        def answered() -> list[str] | None:
            texts = self.bot_texts(room)
            return texts if text in texts else None

        try:
            return wait_for(answered, timeout, f"the bot's {text!r}")
        except TimeoutError:
            raise AssertionError(f"no {text!r}\n{self.daemon.log()[-5000:]}") from None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return self.daemon.query(sql, params)

    def wait_first_sync(self) -> None:
        """Until the daemon stored its first sync: what is written before that is a fresh
        database's past, never answered (intake's rule), so a test that writes at once after
        the start would race it."""
        sql = "SELECT 1 FROM kv WHERE key = 'matrix_since'"
        wait_for(lambda: self.query(sql), 60, "the first sync stored")


@contextmanager
def matrix_rig(
    tmp: Path,
    cast: Cast,
    *,
    extra: str = "",
    direct: bool = False,
    llm_args: dict[str, Any] | None = None,
    **env: str,
) -> Iterator[MatrixRig]:
    """`direct`: agentd talks to Synapse itself, not through the window proxy (benchmarks);
    `llm_args`: the model fake's (a slow stream, say)."""
    with (
        WindowProxy.running(cast.server.url) as proxy,
        FakeTelegram.running() as tg,
        FakeAnthropic.running(**(llm_args or {})) as llm,
    ):
        url = cast.server.url if direct else proxy.base_url
        config = CONFIG.format(url=url, bot=cast.bot_user_id, owner=cast.owner.user_id, extra=extra)
        (tmp / "agentd.toml").write_text(config)
        overrides = {
            "AGENTD_CONFIG": str(tmp / "agentd.toml"),
            "AGENTD_CHAT__STREAMING": "false",
            "MATRIX_PASSWORD": cast.bot_password,
            **env,
        }
        environment = daemon_env(tmp, tg.base_url, llm.base_url, **overrides)
        with running_daemon(tmp, environment) as daemon:
            yield MatrixRig(cast, proxy, tg, llm, daemon)
