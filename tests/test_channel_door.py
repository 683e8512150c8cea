"""The channel door (agentd/chat/channel.py): each chat's output goes to the channel that owns
it by the chat id's block alone, the channels are one list, and the daemon names none."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentd.channels import channels, packages
from agentd.chat.channel import (
    ID_BLOCK,
    CredentialsRejected,
    Refusal,
    block_start,
    id_block,
)
from agentd.chat.outbox import SendDelayed, SendFailed
from agentd.chat.route import NoChannel, RoutedFiles, RoutedOutbox
from agentd.config import Config
from agentd.durable import NonRetryable

ROOT = Path(__file__).resolve().parents[1] / "agentd"


class Recorder:
    """An outbox that records what it was asked to send."""

    def __init__(self, name: str, chunk: int = 10) -> None:
        self.name, self.chunk, self.sent = name, chunk, []

    def split(self, markdown: str) -> list[str]:
        return [markdown[i : i + self.chunk] for i in range(0, len(markdown), self.chunk)]

    async def send_text(self, chat_id: int, markdown: str, **kw: Any) -> int:
        self.sent.append(("text", chat_id, markdown))
        return len(self.sent)

    async def edit_text(self, chat_id: int, message_id: int, markdown: str, **kw: Any) -> None:
        self.sent.append(("edit", chat_id, markdown))

    async def send_document(self, chat_id: int, path: str, filename: str, **kw: Any) -> int:
        self.sent.append(("file", chat_id, filename))
        return len(self.sent)

    async def answer_callback(self, callback_id: str, text: str, *, alert: bool = False) -> None:
        self.sent.append(("answer", None, text))

    async def send_draft(self, chat_id: int, draft_id: int, text: str, **kw: Any) -> bool:
        self.sent.append(("draft", chat_id, text))
        return True

    async def chat_action(self, chat_id: int) -> None:
        self.sent.append(("action", chat_id, ""))

    @asynccontextmanager
    async def typing(self, chat_id: int) -> AsyncIterator[None]:
        self.sent.append(("typing", chat_id, ""))
        yield


def test_ids_fall_in_one_block_each() -> None:
    assert id_block(42) == id_block(-1001234567890) == 0  # Telegram's, either sign
    assert id_block(block_start(1)) == id_block(block_start(2) - 1) == 1
    assert id_block(block_start(3) + 17) == 3 and block_start(1) == ID_BLOCK


async def test_each_chats_output_goes_to_the_channel_that_owns_it() -> None:
    telegram, other = Recorder("telegram", chunk=10), Recorder("other", chunk=100)
    outbox = RoutedOutbox({0: telegram, 1: other})
    room = block_start(1) + 5
    await outbox.send_text(-100, "to the group")
    await outbox.send_text(room, "to the room")
    await outbox.edit_text(room, 1, "edited")
    await outbox.send_document(7, "/tmp/x", "x.txt")
    assert await outbox.send_draft(room, 1, "draft")
    await outbox.chat_action(7)
    async with outbox.typing(room):
        pass
    assert [(k, c) for k, c, _ in telegram.sent] == [("text", -100), ("file", 7), ("action", 7)]
    assert [k for k, _, _ in other.sent] == ["text", "edit", "draft", "typing"]
    # Chunks are cut by the strictest open channel, so they fit wherever they go.
    assert outbox.split("x" * 25) == ["x" * 10, "x" * 10, "x" * 5]


async def test_a_chat_of_a_channel_no_longer_configured_is_refused_for_good() -> None:
    outbox = RoutedOutbox({0: Recorder("telegram")})
    with pytest.raises(NoChannel, match="not configured now") as refused:
        await outbox.send_text(block_start(2) + 1, "hello")
    assert isinstance(refused.value, SendFailed)  # deliver() makes it NonRetryable
    assert await outbox.send_draft(block_start(2) + 1, 1, "x") is False
    async with outbox.typing(block_start(2) + 1):  # best effort: nothing, and no error
        pass


class FakeFiles:
    def __init__(self, scheme: str) -> None:
        self.scheme = scheme

    def handles(self, file_id: str) -> bool:
        return file_id.startswith(self.scheme)

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        return f"{self.scheme}:{file_id}".encode()


async def test_a_file_is_read_by_the_channel_that_handles_its_id() -> None:
    files = RoutedFiles([FakeFiles("mxc://"), FakeFiles("")])
    assert await files.download("mxc://server/abc", 10) == b"mxc://:mxc://server/abc"
    assert await files.download("AgAC", 10) == b":AgAC"
    with pytest.raises(NonRetryable, match="no configured channel"):
        await RoutedFiles([FakeFiles("mxc://")]).download("AgAC", 10)


def test_the_channels_are_one_list_with_distinct_blocks() -> None:
    found = channels()
    assert [c.name for c in found][:1] == ["telegram"] and packages()[:1] == ["telegram"]
    assert len({c.block for c in found}) == len(found)
    config = Config()
    for channel in found:
        for member in ("enabled", "secret_names", "secret_values", "checks", "open"):
            assert callable(getattr(channel, member)), f"{channel.name}.{member}"
        assert isinstance(channel.secret_names(config), list)


def test_the_daemon_names_no_channel() -> None:
    """agentd/daemon/ reaches channels only through agentd/channels/'s list."""
    named = []
    for path in sorted((ROOT / "daemon").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for module in modules:
                if any(module.startswith(f"agentd.{p}") for p in packages()):
                    named.append(f"{path.name}:{node.lineno} imports {module}")
    assert not named, named


async def test_a_refusal_met_by_a_send_ends_the_intake_with_it_and_waits_for_a_restart() -> None:
    """A channel's latch: the intake ends with the refusal a send met (agentd then stops), an
    intake's own end is kept as it is, and the refusal is one that waits for a restart."""
    never = asyncio.Event()

    async def intake() -> None:
        await never.wait()

    refusal = Refusal(lambda: CredentialsRejected("the token was revoked; check TOKEN"))
    serving = asyncio.create_task(refusal.serve(intake()))
    await asyncio.sleep(0)
    problem = refusal.refuse()
    assert refusal.refuse() is problem and problem.needs_restart is True
    with pytest.raises(CredentialsRejected, match="check TOKEN"):
        await serving

    async def failing() -> None:
        raise RuntimeError("the intake's own end")

    with pytest.raises(RuntimeError, match="own end"):
        await Refusal(lambda: CredentialsRejected("unused")).serve(failing())


class _Refused:
    """A network client whose every call meets credentials it no longer takes."""

    def __init__(self, error: Exception) -> None:
        self.error, self.calls = error, 0

    async def _refuse(self, *args: Any) -> None:
        self.calls += 1
        raise self.error

    leave_chat = join = leave = _refuse


def _telegram_leave(refusal: Refusal) -> tuple[Any, str, dict[str, Any], _Refused]:
    from aiogram.exceptions import TelegramUnauthorizedError
    from aiogram.methods import LeaveChat

    from agentd.telegram.groups import LEAVE_WORKFLOW, make_leave_workflow

    client = _Refused(TelegramUnauthorizedError(LeaveChat(chat_id=-5), "Unauthorized"))
    return make_leave_workflow, LEAVE_WORKFLOW, {"chat_id": -5, "reason": "stranger"}, client


def _matrix_join(refusal: Refusal) -> tuple[Any, str, dict[str, Any], _Refused]:
    from agentd.matrix.client import MatrixError, MatrixFault
    from agentd.matrix.rooms import ROOM_WORKFLOW, make_room_workflow

    client = _Refused(MatrixError(MatrixFault(kind="auth", reason="HTTP 401 M_UNKNOWN_TOKEN")))
    return make_room_workflow, ROOM_WORKFLOW, {"room_id": "!r:hs", "action": "join"}, client


@pytest.mark.parametrize("case", [_telegram_leave, _matrix_join])
async def test_a_channels_own_workflow_waits_out_refused_credentials(db: Any, case: Any) -> None:
    """Leaving a group, joining a room: a call refused for the credentials is not given up
    (never joined after the fix): the channel's latch is set and the workflow waits."""
    from agentd.durable import Engine, FakeClock, store

    refusal = Refusal(lambda: CredentialsRejected("revoked"))
    make, name, inp, client = case(refusal)
    engine = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    engine.register(make(client, db, refusal))
    await engine.run()
    await engine.start(name, inp, instance_id="w")
    while (await db.read(store.get_instance, "w")).status in ("queued", "running"):
        await asyncio.sleep(0.005)
    await engine.settled()
    assert (await db.read(store.get_instance, "w")).status == "waiting"
    assert client.calls == 1 and refusal.met is not None
    await engine.shutdown(grace=0)


@pytest.mark.parametrize(
    ("kind", "raised"),
    [("transient", SendDelayed), ("auth", CredentialsRejected), ("permanent", SendFailed)],
)
async def test_a_matrix_send_says_outage_refused_credentials_or_refused_for_good(
    kind: str, raised: type[Exception]
) -> None:
    """What a failed send means to the step that made it: an outage is tried again later, a
    logged-out login waits for the restart, anything else is final."""
    from agentd.matrix.client import MatrixError, MatrixFault
    from agentd.matrix.output import MatrixOutbox

    class Client:
        async def send(self, *args: Any) -> str:
            raise MatrixError(MatrixFault(kind=kind, reason="HTTP 5xx / 401 / 403"))

    refusal = Refusal(lambda: CredentialsRejected("logged out"))
    outbox = MatrixOutbox(Client(), max_message_chars=100, max_file_bytes=100, refusal=refusal)
    with pytest.raises(raised):
        await outbox._event("!room:hs", "m.room.message", {"body": "hi"})
    assert (refusal.met is not None) == (kind == "auth")
