"""Units: media kinds from updates, documents refused or read, files out of tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agentd.chat.inputs import MediaRef
from agentd.chat.outfiles import OutgoingFile, spool
from agentd.media.chatdocs import format_of, refusal
from agentd.telegram.classify import classify_update
from agentd.tools import ToolContext, execute, tool
from tests.test_classify import ME, message


def test_voice_audio_and_round_videos_are_voice_turns_with_their_file() -> None:
    for kind in ("voice", "audio", "video_note"):
        item = {
            "file_id": f"F-{kind}",
            "file_unique_id": "u",
            "duration": 3,
            "mime_type": "audio/ogg",
            "file_size": 900,
        }
        turn = classify_update(message(**{kind: item}, caption="listen"), ME).turn
        assert turn and turn.kind == "voice" and turn.media and turn.media.kind == kind
        assert turn.media.file_id == f"F-{kind}" and turn.media.duration == 3
        assert turn.text == "listen" and not turn.media.forwarded
    forwarded = classify_update(
        message(voice={"file_id": "v"}, forward_origin={"type": "user"}), ME
    )
    assert forwarded.turn and forwarded.turn.media and forwarded.turn.media.forwarded


def test_documents_are_document_turns_and_malformed_media_stays_unsupported() -> None:
    doc = {"file_id": "D", "file_name": "a.pdf", "mime_type": "application/pdf"}
    turn = classify_update(message(document=doc), ME).turn
    assert turn and turn.kind == "document" and turn.media and turn.media.file_name == "a.pdf"
    broken = classify_update(message(voice={"duration": 2}), ME).turn  # no file_id
    assert broken and broken.kind == "unsupported" and broken.unsupported_kind == "voice"


def test_document_types_and_sizes() -> None:
    assert format_of(MediaRef(kind="document", file_id="x", file_name="Notes.MD")) == "markdown"
    assert format_of(MediaRef(kind="document", file_id="x", mime_type="application/pdf")) == "pdf"
    heic = refusal(MediaRef(kind="document", file_id="x", file_name="pic.heic"), 10_000)
    assert heic and "pic.heic" in heic and "PDF" in heic
    big = refusal(
        MediaRef(kind="document", file_id="x", file_name="a.pdf", file_size=20_000_000), 1_000_000
    )
    assert big and "20.0 MB" in big and "1.0 MB" in big


def test_outgoing_files_are_plain_names_spooled_by_hash(tmp_path: Path) -> None:
    assert OutgoingFile(filename="../../etc/passwd", data=b"x").filename == "_.._etc_passwd"
    with pytest.raises(ValidationError):
        OutgoingFile(filename="..", data=b"x")
    spooled = spool(OutgoingFile(filename="r.csv", data=b"a,b\n"), tmp_path / "out")
    again = spool(OutgoingFile(filename="copy.csv", data=b"a,b\n"), tmp_path / "out")
    assert spooled.path == again.path and Path(spooled.path).read_bytes() == b"a,b\n"
    assert (Path(spooled.path).stat().st_mode & 0o777) == 0o600
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o700


@tool
async def make_file(ctx: ToolContext, name: str) -> OutgoingFile:
    """Make a file."""
    return OutgoingFile(filename=name, data=b"report body")


async def test_a_tool_returning_a_file_is_spooled_and_told_to_the_model(tmp_path: Path) -> None:
    ctx = ToolContext(
        chat_id=1, chat_kind="private", user_id=2, instance_id="i", outgoing_dir=str(tmp_path)
    )
    outcome = await execute(make_file, ctx, {"name": "r.txt"})
    assert outcome.ok and "r.txt" in outcome.content and "will be sent" in outcome.content
    assert "report body" not in outcome.model_dump_json()  # the journal holds the path only
    with open(outcome.files[0].path, "rb") as spooled:
        assert spooled.read() == b"report body"
    nowhere = await execute(
        make_file,
        ToolContext(chat_id=1, chat_kind="private", user_id=2, instance_id="i"),
        {"name": "r.txt"},
    )
    assert not nowhere.ok and "cannot be sent" in nowhere.content
