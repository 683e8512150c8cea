"""The access token a Matrix password login returns is a secret agentd learns only then: the
process's redactor hides it from that moment on (the log, the journal, a tool's result).
Against a real Synapse, through the channel's own open and identify."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.channels import config_class
from agentd.chat.channel import ChannelContext
from agentd.matrix.channel import MatrixChannel
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
