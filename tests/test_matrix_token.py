"""The access token a Matrix password login returns is a secret agentd learns only then: the
process's redactor hides it from that moment on (the log, the journal, a tool's result).
Against a real Synapse, through the channel's own open and identify. And the STATUS= line
sent while the homeserver does not answer goes through the same redactor, and is replaced once
the login succeeds."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.channels import config_class
from agentd.chat.channel import ChannelContext, StoppedDuringStartUp
from agentd.matrix.channel import MatrixChannel, OpenMatrix
from agentd.runtime.redact import Redactor
from tests.matrixserver import Cast, cast_running

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cast]:
    with cast_running(Path(tmp_path_factory.mktemp("synapse"))) as running:
        yield running


async def _log_in(cast: Cast, redactor: Redactor) -> str:
    """Open the channel and identify (a password login); the token the server issued."""
    settings = {"homeserver": cast.server.url, "user_id": cast.bot_user_id}
    config = config_class().model_validate({"matrix": settings})

    async def uncertain(*args: Any) -> None: ...

    async with contextlib.AsyncExitStack() as stack:
        secrets = config.secret_source({"MATRIX_PASSWORD": cast.bot_password})
        ctx = ChannelContext(config, secrets, stack, uncertain, redactor)
        opened = await MatrixChannel().open(ctx)
        try:
            await opened.identify(asyncio.Event())
            return opened.client.access_token
        finally:
            await opened.close()


def test_a_password_logins_token_is_hidden_from_then_on(cast: Cast) -> None:
    redactor = Redactor([cast.bot_password])
    token = asyncio.run(_log_in(cast, redactor))
    assert token and token != cast.bot_password
    assert redactor(f"GET /sync Authorization: Bearer {token}") == (
        "GET /sync Authorization: Bearer [REDACTED]"
    )
    assert redactor(repr(f"token={token}")) == "'token=[REDACTED]'"


def test_the_status_line_while_waiting_for_the_homeserver_is_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd's STATUS= line is written past the log's formatter: a homeserver's answer
    quoted in the wait reason goes through the same redactor as the log line."""
    from agentd.matrix.client import MatrixError, MatrixFault

    secret = "configured-secret-0042"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(30)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    settings = {"homeserver": "http://127.0.0.1:9", "user_id": "@bot:agentd.test"}
    config = config_class().model_validate({"matrix": settings})

    async def identify() -> None:
        opened = OpenMatrix(config, "", "a-password", Redactor([secret]))
        stop = asyncio.Event()

        async def refused(**kwargs: Any) -> str:
            stop.set()  # one wait, then the start is given up
            raise MatrixError(MatrixFault(kind="transient", reason=f"HTTP 502 M_{secret}"))

        monkeypatch.setattr(opened.client, "log_in", refused)
        try:
            with pytest.raises(StoppedDuringStartUp):
                await opened.identify(stop)
        finally:
            await opened.close()

    with notify:
        asyncio.run(identify())
        said = notify.recv(4096).decode()
    assert said == "STATUS=waiting for the Matrix homeserver: HTTP 502 M_[REDACTED]"


def test_the_status_line_says_running_once_the_homeserver_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait's STATUS= line does not stay in `systemctl status` after the login succeeds."""
    from agentd.matrix.client import MatrixError, MatrixFault

    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    settings = {"homeserver": "http://127.0.0.1:9", "user_id": "@bot:agentd.test"}
    config = config_class().model_validate({"matrix": settings})

    async def identify() -> None:
        opened = OpenMatrix(config, "a-token-of-the-bot", "", Redactor([]))
        tries: list[int] = []

        async def once_down(**kwargs: Any) -> str:
            tries.append(1)
            if len(tries) == 1:
                raise MatrixError(MatrixFault(kind="transient", reason="HTTP 502"))
            return "DEVICE"

        monkeypatch.setattr(opened.client, "log_in", once_down)
        try:
            await opened.identify(asyncio.Event())
        finally:
            await opened.close()

    with notify:
        asyncio.run(identify())
        notify.setblocking(False)  # identify has returned: all it sent is queued already
        said: list[str] = []
        with contextlib.suppress(BlockingIOError):
            while True:
                said.append(notify.recv(4096).decode())
    assert said == ["STATUS=waiting for the Matrix homeserver: HTTP 502", "STATUS=running"]
