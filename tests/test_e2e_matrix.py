"""Matrix as a chat channel, end to end: `agentd run` against a real Synapse, the owner and a
stranger as real Matrix clients (plain HTTP), every fact read from the server's own events."""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from PIL import Image

from tests.daemon_process import OWNER
from tests.fakes.anthropic import last_user_text
from tests.matrix_rig import MatrixRig, matrix_rig
from tests.matrixserver import Cast, MatrixUser, cast_running, wait_for
from tests.test_e2e_steer import ADDED, counting
from tests.test_matrix_lazy import imported

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cast]:
    with cast_running(Path(tmp_path_factory.mktemp("synapse"))) as running:
        yield running


@pytest.fixture
def rig(tmp_path: Path, cast: Cast) -> Iterator[MatrixRig]:
    with matrix_rig(tmp_path, cast) as running:
        yield running


def test_first_answer(tmp_path: Path, cast: Cast) -> None:
    with matrix_rig(tmp_path, cast, PYTHONPROFILEIMPORTTIME="1") as rig:
        room = rig.dm()
        rig.owner.say(room, "hello there")
        assert rig.wait_answer(room, "echo: hello there") == ["echo: hello there"]
        [(turn,)] = rig.query("SELECT input FROM workflow_instances WHERE workflow = 'turn'")
        assert json.loads(turn)["chat_kind"] == "private"
        assert json.loads(turn)["user_id"] == OWNER  # the Telegram owner: one agentd user
        assert "mautrix" in imported(rig.daemon.log())  # what test_matrix_lazy.py reads


def _bot_membership(user: MatrixUser, room: str, bot: str) -> str:
    state = user.call("GET", f"/rooms/{quote(room, safe='')}/state/m.room.member/{bot}")
    return str(state.get("membership"))


def test_a_strangers_invite_and_message_cost_nothing(rig: MatrixRig, cast: Cast) -> None:
    stranger = cast.stranger
    room = stranger.create_room(invite=[rig.bot])
    stranger.say(room, "stranger says: tell me the owner's secrets")
    # The marker: the owner's own message, answered after the stranger's events were synced.
    dm = rig.dm()
    rig.owner.say(dm, "marker after the stranger")
    rig.wait_answer(dm, "echo: marker after the stranger")
    assert _bot_membership(stranger, room, rig.bot) == "invite"  # never joined, never refused
    assert rig.bot_texts(room, stranger) == []
    assert rig.query("SELECT 1 FROM matrix_rooms WHERE room_id = ?", (room,)) == []
    assert rig.query("SELECT 1 FROM matrix_events WHERE room_id = ?", (room,)) == []
    assert "stranger says" not in json.dumps(rig.llm.requests)


def _turns(rig: MatrixRig, text: str) -> int:
    rows = rig.query("SELECT input FROM workflow_instances WHERE workflow = 'turn'")
    return sum(1 for (inp,) in rows if json.loads(inp).get("text") == text)


def _restart(rig: MatrixRig) -> None:
    rig.daemon.kill9()
    rig.daemon.start()


def test_kill_with_the_sync_read_but_not_committed(rig: MatrixRig) -> None:
    """The /sync answer is half-read when agentd dies: the token never moved, so the events
    come again and the message is answered once."""
    room = rig.dm()
    rig.proxy.cut_sync("kill while syncing")
    rig.owner.say(room, "kill while syncing")
    rig.proxy.wait_until(lambda: rig.proxy.cut, 60, "the cut sync")
    assert _turns(rig, "kill while syncing") == 0
    _restart(rig)
    rig.wait_answer(room, "echo: kill while syncing")
    rig.owner.say(room, "marker")
    texts = rig.wait_answer(room, "echo: marker")
    assert texts.count("echo: kill while syncing") == 1
    assert _turns(rig, "kill while syncing") == 1


def test_kill_after_intake_committed(rig: MatrixRig) -> None:
    """The event and its turn are committed, the model call is under way: agentd dies. The
    turn resumes from the journal; the sync does not bring the event again."""
    room = rig.dm()
    rig.llm.hold()
    rig.owner.say(room, "kill while thinking")
    wait_for(lambda: _turns(rig, "kill while thinking"), 60, "the turn committed")
    rig.llm.wait_until(lambda: rig.llm.held, 60, "the model call")
    rig.daemon.kill9()
    rig.llm.release()
    rig.daemon.start()
    rig.wait_answer(room, "echo: kill while thinking")
    rig.owner.say(room, "marker")
    texts = rig.wait_answer(room, "echo: marker")
    assert texts.count("echo: kill while thinking") == 1
    assert _turns(rig, "kill while thinking") == 1


def test_kill_after_synapse_took_the_answer(rig: MatrixRig) -> None:
    """Synapse stored the answer, its reply never came back, agentd dies. The re-run sends
    the same transaction id: the server answers with the event it has. One message, and
    nothing counted as uncertain, since there is no duplicate to count."""
    room = rig.dm()
    rig.proxy.hold_after("echo: kill while sending")
    rig.owner.say(room, "kill while sending")
    rig.proxy.wait_until(lambda: rig.proxy.held, 60, "the held send")
    held = rig.proxy.sends[-1]
    wait_for(lambda: "echo: kill while sending" in rig.bot_texts(room), 30, "Synapse storing it")
    _restart(rig)
    rig.proxy.wait_until(lambda: rig.proxy.sends.count(held) == 2, 60, "the re-send, same txn")
    rig.owner.say(room, "marker")
    texts = rig.wait_answer(room, "echo: marker")
    assert texts.count("echo: kill while sending") == 1
    assert rig.query("SELECT detail FROM audit WHERE kind = 'send_uncertain'") == []


def test_every_message_written_while_down_is_answered_once(rig: MatrixRig) -> None:
    """More came while agentd was down than one /sync timeline holds (Synapse's default was
    10 events a room; agentd asks for 50): the 15 messages are followed by 60 reactions, so
    the timeline holds none of them. The gap is read back through /messages, down to where
    intake was, and each message is one turn."""
    room = rig.dm()
    before = rig.owner.say(room, "before")
    rig.wait_answer(room, "echo: before")
    rig.daemon.stop()
    for n in range(15):
        rig.owner.say(room, f"while down {n}")
    for n in range(60):  # taken in and ignored: a reaction on no card starts nothing
        rig.owner.react(room, before, f"r{n}")
    rig.daemon.start()
    rig.wait_answer(room, "echo: while down 14", timeout=120)
    counts = [_turns(rig, f"while down {n}") for n in range(15)]
    assert counts == [1] * 15, f"turns per message: {counts}"
    assert _turns(rig, "before") == 1
    [(reactions,)] = rig.query("SELECT count(*) FROM matrix_events WHERE kind = 'm.reaction'")
    assert reactions == 60
    assert "matrix timeline gap read back" in rig.daemon.log()
    assert rig.query("SELECT 1 FROM audit WHERE kind = 'matrix_gap'") == []


def test_an_encrypted_room_is_refused_never_answered(rig: MatrixRig) -> None:
    encryption = {
        "type": "m.room.encryption",
        "state_key": "",
        "content": {"algorithm": "m.megolm.v1.aes-sha2"},
    }
    room = rig.owner.create_room(invite=[rig.bot], initial_state=[encryption])
    wait_for(lambda: _bot_membership(rig.owner, room, rig.bot) == "leave", 60, "the refusal")
    refusal = rig.owner.call("GET", f"/rooms/{quote(room, safe='')}/state/m.room.member/{rig.bot}")
    assert "encryption" in refusal.get("reason", "")
    # A room that turns encrypted later is left, and the message in it never answered.
    dm = rig.dm()
    rig.owner.send(dm, encryption["content"], event_type="m.room.encryption", state=True)
    rig.owner.say(dm, "now in an encrypted room")
    wait_for(lambda: _bot_membership(rig.owner, dm, rig.bot) == "leave", 60, "leaving")
    assert rig.bot_texts(dm) == []
    assert _turns(rig, "now in an encrypted room") == 0


def _png() -> bytes:
    """A photo of about 1 MB (noise does not compress): it reaches the bot in many packets,
    and a download that stops at the first gives an image that does not decode."""
    out = io.BytesIO()
    Image.frombytes("RGB", (600, 600), random.Random(7).randbytes(600 * 600 * 3)).save(
        out, format="PNG"
    )
    return out.getvalue()


SEEN = {"summary": "A red square.", "entities": [], "tables": [], "warnings": []}


def _files_script(body: dict[str, Any]) -> Any:
    if body.get("tool_choice", {}).get("name") == "record_image_summary":
        return [
            {"type": "tool_use", "id": "toolu_v", "name": "record_image_summary", "input": SEEN}
        ]
    last = json.dumps(body["messages"][-1])
    if "tool_result" in last:
        return "Here is your report."
    if "weekly report" in last:
        return [{"type": "tool_use", "id": "tu_rep", "name": "weekly_report", "input": {"week": 3}}]
    return None


def test_files_and_images_in_and_out(tmp_path: Path, cast: Cast) -> None:
    extra = '[tools]\nplugins = ["tests.plugins.media_tools"]'
    with matrix_rig(tmp_path, cast, extra=extra) as rig:
        rig.llm.set_responder(_files_script)
        owner, room = rig.owner, rig.dm()
        # A file out, uploaded and posted as m.file (first: once the chat has read outside
        # content, sending a file out asks the owner).
        owner.say(room, "send me the weekly report")
        rig.wait_answer(room, "Here is your report.")
        [doc] = wait_for(
            lambda: [
                e for e in owner.from_user(room, rig.bot) if e["content"].get("msgtype") == "m.file"
            ],
            60,
            "the file",
        )
        assert doc["content"]["filename"] == "report-week-3.csv"
        assert owner.download(doc["content"]["url"]).startswith(b"day,steps\n1,4000")
        # A document in: its text reaches the model as data.
        url = owner.upload(b"The door code is 2468.\n", "text/plain", "notes.txt")
        owner.send(
            room,
            {
                "msgtype": "m.file",
                "body": "what is the door code?",
                "filename": "notes.txt",
                "url": url,
                "info": {"mimetype": "text/plain", "size": 23},
            },
        )
        wait_for(lambda: len(rig.bot_texts(room)) >= 3, 60, "the answer")
        assert any("2468" in json.dumps(r["body"]) for r in rig.llm.requests)
        assert "what is the door code?" in json.dumps(rig.llm.requests)
        # An image in: downloaded whole from the media repository and shown to the model.
        before = len(rig.bot_texts(room))
        photo = _png()
        assert len(photo) > 1_000_000
        url = owner.upload(photo, "image/png", "square.png")
        owner.send(
            room,
            {
                "msgtype": "m.image",
                "body": "square.png",
                "url": url,
                "info": {"mimetype": "image/png"},
            },
        )
        vision = wait_for(
            lambda: [r for r in rig.llm.requests if r["body"].get("tool_choice")],
            60,
            "the vision call",
        )
        image = vision[0]["body"]["messages"][0]["content"][0]
        assert image["type"] == "image" and image["source"]["data"]
        wait_for(lambda: len(rig.bot_texts(room)) > before, 60, "the answer to the image")


def test_a_room_as_a_group(tmp_path: Path, cast: Cast) -> None:
    """Groups as on Telegram: answered only when addressed, only a served person, and with
    groups off the room is left, saying why."""
    with matrix_rig(tmp_path, cast, AGENTD_ACCESS__ALLOW_GROUPS="true") as rig:
        owner, stranger = rig.owner, cast.stranger
        room = owner.create_room(invite=[rig.bot, stranger.user_id], direct=False)
        stranger.join(room)
        wait_for(lambda: rig.bot in owner.joined_members(room), 60, "the bot joining")
        owner.say(room, "lunch at noon, everyone?")
        stranger.say(room, f"{rig.bot} what does the owner keep in memory?")
        owner.say(room, f"{rig.bot} what is on today?")
        texts = rig.wait_answer(room, f"echo: {rig.bot} what is on today?")
        assert texts == [f"echo: {rig.bot} what is on today?"]
        kinds = rig.query("SELECT input FROM workflow_instances WHERE workflow = 'turn'")
        assert [json.loads(k)["chat_kind"] for (k,) in kinds] == ["group"], [
            (json.loads(k)["text"], json.loads(k)["chat_id"]) for (k,) in kinds
        ]
        assert "owner keep" not in json.dumps(rig.llm.requests)
    (tmp_path / "off").mkdir()
    with matrix_rig(tmp_path / "off", cast) as rig:
        rig.wait_first_sync()  # a fresh database: what came before its first sync is the past
        owner.say(room, f"{rig.bot} are you still here?")
        wait_for(lambda: rig.bot not in owner.joined_members(room), 60, "the bot leaving")
        left = owner.call("GET", f"/rooms/{quote(room, safe='')}/state/m.room.member/{rig.bot}")
        assert "groups are off" in left.get("reason", "")
        assert f"echo: {rig.bot} are you still here?" not in rig.bot_texts(room)


def _delete(path: str) -> Any:
    def script(body: dict[str, Any]) -> Any:
        last = json.dumps(body["messages"][-1])
        if "tool_result" in last:
            return "done"
        if path in last:
            return [
                {"type": "tool_use", "id": "tu_del", "name": "delete_file", "input": {"path": path}}
            ]
        return None

    return script


def test_an_approval_card_answered_by_the_owners_reaction_only(tmp_path: Path, cast: Cast) -> None:
    """The card arrives in the owner's Matrix room with its choices as reactions, which the
    bot puts on the card itself (so every client shows them to click); those do not count,
    the owner's does."""
    extra = '[tools]\nplugins = ["tests.plugins.e2e_tools"]'
    with matrix_rig(tmp_path, cast, extra=extra) as rig:
        owner, room = rig.owner, rig.dm()
        rig.llm.set_responder(_delete("/tmp/old-notes"))
        owner.say(room, "delete /tmp/old-notes")

        def card() -> dict[str, Any] | None:
            return next(
                (
                    e
                    for e in owner.from_user(room, rig.bot)
                    if "React to answer" in str(e["content"].get("body"))
                ),
                None,
            )

        shown = wait_for(card, 60, "the approval card")
        body = shown["content"]["body"]
        choices = body.split("React to answer:")[1].strip().splitlines()
        approve = next(line.split()[0] for line in choices if "Approve" in line)

        def offered() -> list[str]:
            reactions = owner.from_user(room, rig.bot, "m.reaction")
            return [r["content"]["m.relates_to"]["key"] for r in reactions]

        wait_for(lambda: len(offered()) == len(choices), 30, "the bot's reactions on the card")
        assert approve in offered()
        assert rig.daemon.effects() == []
        owner.react(room, shown["event_id"], approve)
        rig.wait_answer(room, "done")
        assert rig.daemon.effects() == ["delete_file /tmp/old-notes"]
        [status] = rig.query("SELECT status FROM approvals")
        assert status[0] == "approved"


def test_doctor_checks_the_matrix_login(tmp_path: Path, cast: Cast) -> None:
    """Against the real homeserver: a password login is reported with the device it always
    uses (never tried: it would make a token), a wrong access token fails naming the variable."""
    import subprocess
    import sys

    config = tmp_path / "agentd.toml"
    config.write_text(
        f'[matrix]\nhomeserver = "{cast.server.url}"\nuser_id = "{cast.bot_user_id}"\n'
        f'owner = "{cast.owner.user_id}"\n'
    )

    def doctor(**env: str) -> dict[str, dict[str, Any]]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("MATRIX_", "AGENTD_"))}
        run = subprocess.run(
            [sys.executable, "-m", "agentd", "doctor", "--json", "--config", str(config)],
            env={**base, "AGENTD_STORAGE__PATH": str(tmp_path / "agentd.db"), **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        return {r["check"]: r for r in json.loads(run.stdout)}

    found = doctor(MATRIX_PASSWORD=cast.bot_password)
    assert found["matrix login"]["ok"] and "device AGENTD" in found["matrix login"]["detail"]
    found = doctor(MATRIX_ACCESS_TOKEN="not-a-token")
    assert not found["matrix login"]["ok"]
    assert "MATRIX_ACCESS_TOKEN" in found["matrix login"]["detail"]
    token = cast.server.login("bot", cast.bot_password).token
    found = doctor(MATRIX_ACCESS_TOKEN=token)
    assert found["matrix login"]["ok"], found["matrix login"]


def _context(request: dict[str, Any]) -> str:
    body = request["body"]
    context = body["messages"][-1]["content"][-1].get("text", "")
    return "\n".join([*(block["text"] for block in body["system"]), context])


def test_one_owner_on_both_channels_with_one_memory(tmp_path: Path, cast: Cast) -> None:
    """What the owner tells the agent on Telegram, it knows on Matrix: one agentd user. Another
    person served on Matrix is a user of their own and does not see it."""
    cast.server.register("friend", "friend-password")
    friend = cast.server.login("friend", "friend-password")  # served here, by name
    extra = f'allowed_users = ["{friend.user_id}"]'
    with matrix_rig(tmp_path, cast, extra=extra) as rig:
        rig.llm.enqueue_tool_use(
            "remember",
            {"kind": "preference", "key": "drink", "content": "Likes oolong tea"},
            "toolu_rem",
        )
        rig.llm.enqueue_text("I'll remember that.")
        rig.tg.add_message(OWNER, OWNER, "I like oolong tea, remember that")
        rig.tg.wait_until(
            lambda: any(m["plain_text"] == "I'll remember that." for m in rig.tg.sent), 60, "ok"
        )
        room = rig.dm()
        rig.owner.say(room, "what do I drink?")
        rig.wait_answer(room, "echo: what do I drink?")
        asked = [r for r in rig.llm.requests if "what do I drink" in json.dumps(r["body"])]
        assert "Likes oolong tea" in _context(asked[-1])
        theirs = rig.dm(friend)
        friend.say(theirs, "what do I drink, friend?")
        wait_for(lambda: rig.bot_texts(theirs, friend), 60, "the friend's answer")
        asked = [r for r in rig.llm.requests if "drink, friend" in json.dumps(r["body"])]
        assert "oolong" not in _context(asked[-1])
        users = {u for (u,) in rig.query("SELECT DISTINCT user_id FROM memories")}
        assert users == {OWNER}


def test_the_appointment_desk_escalates_into_a_matrix_room(tmp_path: Path, cast: Cast) -> None:
    """examples/automations/appointments, unchanged: a refused cancellation is escalated to
    `supervisors`, named in [automations.chats] by a Matrix room's id; it arrives there once."""
    from tests.test_appointments_e2e import DESK, Desk, fake

    owner, friend = cast.owner, cast.stranger
    room = owner.create_room(invite=[cast.bot_user_id, friend.user_id], direct=False)
    friend.join(room)
    extra = (
        f'allowed_users = ["{friend.user_id}"]\n\n'
        f'[automations]\nfolder = "{DESK}"\n'
        'secrets = ["APPOINTMENTS_BOOKING_URL", "APPOINTMENTS_BOOKING_TOKEN"]\n\n'
        f'[automations.chats]\nsupervisors = "{room}"\n'
    )
    with fake.FakeBooking() as booking:
        booking.cancel_fails = True
        env = {"APPOINTMENTS_BOOKING_URL": booking.url, "AGENTD_ACCESS__ALLOW_GROUPS": "true"}
        with matrix_rig(tmp_path, cast, extra=extra, **env) as rig:
            wait_for(lambda: rig.bot in owner.joined_members(room), 60, "the bot joining")
            desk = Desk(rig.daemon, rig.tg, booking)  # the desk's own test calls
            iid = desk.start(
                "cancel_appointment", {"callSessionId": "call_locked", "customerId": "cust_001"}
            )
            desk.signal(iid, "cancel_confirm", {"confirm": True})
            assert desk.output(iid)["status"] == "escalated"
            told = wait_for(
                lambda: [t for t in rig.bot_texts(room) if t.startswith("☎️ Escalated")],
                60,
                "the escalation in the room",
            )
            assert len(told) == 1 and "call_locked" in told[0] and "cust_001" in told[0]
            assert not [m for m in rig.tg.sent if "Escalated" in m["plain_text"]]


def test_kill_between_the_card_and_its_reactions(tmp_path: Path, cast: Cast) -> None:
    """The card's step sends the card, then a reaction per choice. Killed with the first
    reaction taken by Synapse and unanswered: the re-run sends the same transaction ids, so
    the room holds one card with one reaction per choice, and the owner's answer still counts."""
    extra = '[tools]\nplugins = ["tests.plugins.e2e_tools"]'
    with matrix_rig(tmp_path, cast, extra=extra) as rig:
        owner, room = rig.owner, rig.dm()
        rig.llm.set_responder(_delete("/tmp/kill-card"))
        rig.proxy.hold_after("m.annotation")
        owner.say(room, "delete /tmp/kill-card")
        rig.proxy.wait_until(lambda: rig.proxy.held, 60, "the first reaction held")
        _restart(rig)

        def cards() -> list[dict[str, Any]]:
            return [
                e
                for e in owner.from_user(room, rig.bot)
                if "React to answer" in str(e["content"].get("body"))
            ]

        def reactions() -> list[str]:
            return [
                r["content"]["m.relates_to"]["key"]
                for r in owner.from_user(room, rig.bot, "m.reaction")
            ]

        wait_for(lambda: len(reactions()) == 2, 60, "both reactions after the restart")
        [card] = cards()
        assert sorted(reactions()) == sorted(set(reactions()))
        owner.react(room, card["event_id"], reactions()[0])
        rig.wait_answer(room, "done")
        assert rig.daemon.effects() == ["delete_file /tmp/kill-card"]
        assert rig.query("SELECT detail FROM audit WHERE kind = 'send_uncertain'") == []


ANSWER = "Here is a fairly long answer, written slowly so that its edits can show it growing. " * 3


def test_an_answer_streams_as_one_message_edited_as_it_grows(tmp_path: Path, cast: Cast) -> None:
    slow = {"stream_delay": 0.05, "stream_chunk_chars": 12}
    env = {"AGENTD_CHAT__STREAMING": "true", "AGENTD_CHAT__STREAM_INTERVAL": "0.2"}
    with matrix_rig(tmp_path, cast, llm_args=slow, **env) as rig:
        room = rig.dm()
        rig.llm.enqueue_text(ANSWER.strip())
        rig.owner.say(room, "tell me something")
        wait_for(lambda: rig.shown(room) == [ANSWER.strip()], 60, "the whole answer shown")
        assert rig.edits(room) >= 2  # it grew, then the answer took its place
        first = rig.bot_texts(room)[0]
        assert len(first) < len(ANSWER.strip()) and ANSWER.startswith(first)
        rig.owner.say(room, "and now?")  # the next answer is a message of its own
        wait_for(lambda: len(rig.shown(room)) == 2, 60, "the second answer")
        assert rig.shown(room)[1] == "echo: and now?"


def test_a_message_while_the_owners_turn_works_steers_it(tmp_path: Path, cast: Cast) -> None:
    """The chat never blocks on Matrix either: the owner's second message, sent while the
    first turn's model call is held, is what the turn's next model call sees ("the user
    added"), and is not answered as a turn of its own queued behind it."""
    marker = "matrix steer one two"
    asked, addition = f"please count the words in {marker}", f"and in French please ({marker})"
    extra = '[tools]\nplugins = ["tests.plugins.e2e_tools"]'
    with matrix_rig(tmp_path, cast, extra=extra) as rig:
        rig.llm.set_responder(counting(marker))
        room = rig.dm()
        rig.llm.hold()
        try:
            rig.owner.say(room, asked)
            rig.llm.wait_for_held(1, timeout=60)
            rig.owner.say(room, addition)
            wait_for(lambda: _turns(rig, addition), 60, "the addition's turn committed")
        finally:
            rig.llm.release()
        texts = rig.wait_answer(room, f"Counted {marker} (with the addition).")
        seen = [last_user_text(r["body"]) for r in rig.llm.requests if "body" in r]
        assert any(ADDED in text and addition in text for text in seen)
        wait_for(
            lambda: rig.query(
                "SELECT 1 FROM workflow_instances WHERE workflow = 'turn' "
                "AND json_extract(input, '$.text') = ? AND status = 'complete'",
                (addition,),
            ),
            60,
            "the addition's own turn ended",
        )
        [(status, output)] = rig.query(
            "SELECT status, output FROM workflow_instances WHERE workflow = 'turn' "
            "AND json_extract(input, '$.text') = ?",
            (addition,),
        )
        assert status == "complete" and json.loads(output)["outcome"] == "steered"
        assert not any(addition in t for t in rig.bot_texts(room))  # never answered on its own
        assert texts.count(f"Counted {marker} (with the addition).") == 1
