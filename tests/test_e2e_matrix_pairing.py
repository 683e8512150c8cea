"""A room the bot joined only for a pairing code, through `agentd run` against a real Synapse:
left, without a word (as Telegram answers a stranger's bad code with nothing), after a wrong
code there, and once the code expired unused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.db import open_sync
from tests.matrix_rig import matrix_rig
from tests.matrixserver import Cast, cast_running, wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cast]:
    with cast_running(Path(tmp_path_factory.mktemp("synapse"))) as running:
        yield running


def test_a_room_joined_for_a_code_is_left_after_a_wrong_or_expired_one(
    tmp_path: Path, cast: Cast
) -> None:
    stranger = cast.stranger
    with matrix_rig(tmp_path, cast) as rig:
        rig.daemon.cli_json("pair", "--no-wait")
        wrong = rig.dm(stranger)  # joined while the code waits
        stranger.say(wrong, "/start AAAA-BBBB")
        wait_for(lambda: rig.bot not in stranger.joined_members(wrong), 60, "the bot leaving")
        assert rig.bot_texts(wrong, stranger) == []

        waiting = rig.dm(stranger)  # the code still waits: a new room is joined
        stranger.say(waiting, "hello?")
        conn = open_sync(rig.daemon.db_path)
        try:  # ten minutes pass: the code expires unused
            conn.execute("UPDATE pairing_codes SET expires_at = 0")
            if conn.in_transaction:
                conn.commit()
        finally:
            conn.close()
        wait_for(lambda: rig.bot not in stranger.joined_members(waiting), 60, "the bot leaving")
        assert rig.bot_texts(waiting, stranger) == []
        left = rig.query("SELECT detail FROM audit WHERE kind = 'matrix_room_leave'")
        assert len(left) == 2
        assert rig.query("SELECT COUNT(*) FROM matrix_pairing_rooms")[0][0] == 0
        assert rig.query("SELECT COUNT(*) FROM paired_users")[0][0] == 0
