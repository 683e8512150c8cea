"""What Synapse promises for a re-sent transaction id, measured on the real server.

agentd's exactly-once on Matrix rests on these facts (docs/messages.md, "On Matrix"): a send
is `PUT /rooms/{room}/send/{type}/{txn}`, and the same (room, user, device, txn) gives the
same event, never a second one — also after the homeserver restarted, and from a new login
on the same device; a different device is a different sender as far as dedup goes.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.matrixserver import MatrixUser, Synapse, synapse_running

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    with synapse_running(Path(tmp_path_factory.mktemp("synapse"))) as running:
        yield running


def _pair(server: Synapse) -> tuple[MatrixUser, MatrixUser, str, str]:
    """A sender and a reader in a fresh room; the sender's password."""
    name = f"s{secrets.token_hex(4)}"
    password = secrets.token_hex(8)
    server.register(name, password)
    server.register(f"r{name}", password)
    sender = server.login(name, password, device_id="AGENTD")
    reader = server.login(f"r{name}", password)
    room = reader.create_room(invite=[sender.user_id])
    sender.join(room)
    return sender, reader, room, password


def _count(reader: MatrixUser, room: str, sender: str) -> int:
    return len(reader.from_user(room, sender))


def test_same_txn_same_event(server: Synapse) -> None:
    sender, reader, room, _ = _pair(server)
    first = sender.say_txn(room, "one", "txn-1")
    assert sender.say_txn(room, "one", "txn-1") == first
    assert _count(reader, room, sender.user_id) == 1


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_dedup_survives_a_synapse_restart(server: Synapse, kill: bool) -> None:
    """The in-memory HTTP cache is gone after a restart; the event_txn_id_device_id table is
    not: the re-send still answers with the first event."""
    sender, reader, room, _ = _pair(server)
    first = sender.say_txn(room, "before the restart", "txn-r")
    server.restart(kill=kill)
    assert sender.say_txn(room, "before the restart", "txn-r") == first
    assert _count(reader, room, sender.user_id) == 1


def test_dedup_is_per_device_not_per_token(server: Synapse) -> None:
    """A new login on the same device id (a new access token) is deduplicated; the same txn
    id from another device is another message. So agentd keeps its device id, not a token."""
    sender, reader, room, password = _pair(server)
    first = sender.say_txn(room, "hello", "txn-d")
    name = sender.user_id.split(":")[0][1:]
    again = server.login(name, password, device_id=sender.device_id)
    assert again.token != sender.token
    assert again.say_txn(room, "hello", "txn-d") == first
    other = server.login(name, password, device_id="ELSEWHERE")
    assert other.say_txn(room, "hello", "txn-d") != first
    assert _count(reader, room, sender.user_id) == 2


def test_a_resent_txn_with_other_content_answers_the_first_event_unchanged(
    server: Synapse,
) -> None:
    """What lets an answer sent under its first draft's transaction id find a draft agentd
    never wrote down (matrix/output.py): the event handed back is the draft, its content its
    own; reading it shows the original content, and an edit of it under `unsigned`."""
    sender, reader, room, _ = _pair(server)
    first = sender.say_txn(room, "half an answer", "txn-c")
    assert sender.say_txn(room, "the whole answer", "txn-c") == first
    assert [e["content"]["body"] for e in reader.from_user(room, sender.user_id)] == [
        "half an answer"
    ]
    path = f"/rooms/{quote(room, safe='')}/event/{quote(first, safe='')}"
    assert "m.relations" not in sender.call("GET", path).get("unsigned", {})
    edit = {
        "msgtype": "m.text",
        "body": "* the whole answer",
        "m.new_content": {"msgtype": "m.text", "body": "the whole answer"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": first},
    }
    sender.send(room, edit)
    read = sender.call("GET", path)
    assert read["content"]["body"] == "half an answer"
    assert "m.replace" in read["unsigned"]["m.relations"]


def test_the_sending_device_alone_reads_its_transaction_ids_back_in_the_history(
    server: Synapse,
) -> None:
    """What lets a stopped turn find a first draft agentd never wrote down without sending
    anything (matrix/output.py `_unrecorded_draft`): the room's history, filtered to the
    sender, gives each event the sender's device sent with its transaction id under
    `unsigned` — to that device (a new login on it too, and after Synapse restarted), never
    to another device of the account or to another user."""
    sender, reader, room, password = _pair(server)
    first = sender.say_txn(room, "half an answer", "txn-h")
    sender.say(room, "something else")
    only_sender = json.dumps({"senders": [sender.user_id], "types": ["m.room.message"]})

    def txns(user: MatrixUser) -> dict[str, str | None]:
        path = f"/rooms/{quote(room, safe='')}/messages"
        params = {"dir": "b", "limit": 20, "filter": only_sender}
        chunk = user.call("GET", path, params=params)["chunk"]
        assert {e["sender"] for e in chunk} == {sender.user_id}
        return {e["event_id"]: e.get("unsigned", {}).get("transaction_id") for e in chunk}

    assert txns(sender)[first] == "txn-h"
    name = sender.user_id.split(":")[0][1:]
    server.restart()
    again = server.login(name, password, device_id=sender.device_id)
    assert txns(again)[first] == "txn-h"
    other = server.login(name, password, device_id="ELSEWHERE")
    assert txns(other)[first] is None
    assert txns(reader)[first] is None
