"""Matrix under attack, end to end: `agentd run` against a real Synapse, each attempt to make
agentd lose a message, do something twice or act without the owner's consent, read from the
server's own events and the daemon's database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.matrix_rig import MatrixRig, matrix_rig
from tests.matrixserver import Cast, MatrixUser, cast_running, wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cast]:
    with cast_running(Path(tmp_path_factory.mktemp("synapse"))) as running:
        yield running


@pytest.fixture
def rig(tmp_path: Path, cast: Cast) -> Iterator[MatrixRig]:
    with matrix_rig(tmp_path, cast) as running:
        yield running


def _bot_elsewhere(cast: Cast) -> MatrixUser:
    """The bot's own account on another device, as the owner's client logged in as the bot
    would be (to give it a name or a picture)."""
    return cast.server.login("bot", cast.bot_password, device_id="ELSEWHERE")


def test_a_new_name_for_the_bot_is_no_join_and_loses_nothing(rig: MatrixRig, cast: Cast) -> None:
    """A profile change writes a membership event `join` -> `join` in every room of the bot's.
    It is no join: what the owner wrote before it in the same sync is answered, not taken as
    the room's past."""
    room = rig.dm()
    rig.owner.say(room, "first")
    rig.wait_answer(room, "echo: first")
    rig.daemon.kill9()
    rig.owner.say(room, "written before the rename")
    bot = _bot_elsewhere(cast)
    bot.call("PUT", f"/profile/{quote(rig.bot, safe='')}/displayname", {"displayname": "Agent"})

    def renamed() -> bool:
        return any(
            e.get("state_key") == rig.bot and e["content"].get("displayname") == "Agent"
            for e in rig.owner.messages(room)
        )

    wait_for(renamed, 30, "the bot's new name in the room")
    rig.owner.say(room, "written after the rename")
    rig.daemon.start()
    texts = rig.wait_answer(room, "echo: written after the rename")
    assert "echo: written before the rename" in texts
