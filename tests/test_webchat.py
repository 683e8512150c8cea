"""The web chat's store and outbox on a real database: a re-send under the same step's key is
the same row (nothing counted), an edit is one new change for the cursor, a press counts only
for a button the message carries; the channel refuses to open without the dashboard, and an
owner without `[webchat]` loads none of it."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentd.channels import config_class
from agentd.chat.channel import ChannelContext, ConfigProblem
from agentd.chat.delivery import SEND_KEY, SendKey
from agentd.chat.inputs import CallbackPress
from agentd.chat.outbox import Button, SendFailed
from agentd.config import Config
from agentd.db import Database
from agentd.runtime.redact import Redactor
from agentd.webchat import store
from agentd.webchat.channel import NEEDS_DASHBOARD, WebChatChannel
from agentd.webchat.ids import CHAT_ID
from agentd.webchat.outbox import Hub, WebOutbox, inline_type, keep_file, split_text


def _outbox(db: Database, tmp_path: Path) -> WebOutbox:
    outbox = WebOutbox(Hub(), tmp_path / "files")
    outbox.bind(db)
    return outbox


async def _send_as_step(outbox: WebOutbox, key: str, text: str, resent: list[str]) -> int:
    async def resend() -> None:
        resent.append(key)

    token = SEND_KEY.set(SendKey(key, resend))  # a re-run after a restart: resend is set
    try:
        return await outbox.send_text(CHAT_ID, text)
    finally:
        SEND_KEY.reset(token)


async def test_a_resend_of_the_same_step_is_the_same_message_and_counts_nothing(
    db: Database, tmp_path: Path
) -> None:
    outbox = _outbox(db, tmp_path)
    resent: list[str] = []
    first = await _send_as_step(outbox, "turn-1/send:0", "hello", resent)
    again = await _send_as_step(outbox, "turn-1/send:0", "hello", resent)
    other = await _send_as_step(outbox, "turn-1/send:1", "hello", resent)
    assert first == again != other
    assert resent == []  # idempotent: no send_uncertain for a re-send here
    rows = await db.read(lambda c: c.execute("SELECT COUNT(*) FROM webchat_messages").fetchone())
    assert rows[0] == 2


async def test_an_edit_is_one_new_change_and_the_cursor_sees_each_once(
    db: Database, tmp_path: Path
) -> None:
    outbox = _outbox(db, tmp_path)
    card = await outbox.send_text(
        CHAT_ID, "May I?", buttons=[[Button(text="✅ Approve", data="ap:x:1")]]
    )
    seen = await db.read(store.changes, 0)
    assert [(m["id"], m["buttons"][0][0]["data"]) for m in seen] == [(card, "ap:x:1")]
    cursor = seen[-1]["seq"]
    await outbox.edit_text(CHAT_ID, card, "May I? — approved")
    after = await db.read(store.changes, cursor)
    assert [(m["id"], m["text"], m["buttons"]) for m in after] == [(card, "May I? — approved", [])]
    assert await db.read(store.changes, after[-1]["seq"]) == []
    with pytest.raises(SendFailed):
        await outbox.edit_text(CHAT_ID, card + 99, "no such message")
    with pytest.raises(SendFailed):
        await outbox.send_text(CHAT_ID + 1, "another chat")


async def test_a_press_counts_only_for_a_button_the_message_carries(
    db: Database, tmp_path: Path
) -> None:
    outbox = _outbox(db, tmp_path)
    card = await outbox.send_text(
        CHAT_ID, "May I?", buttons=[[Button(text="Approve", data="ap:x:1")]]
    )
    pressed: list[CallbackPress] = []

    def on_callback(conn: Any, press: CallbackPress) -> str:
        pressed.append(press)
        return "Approved."

    assert await db.write(store.press, card, "ap:y:1", 42, on_callback) is None
    assert await db.write(store.press, card + 1, "ap:x:1", 42, on_callback) is None
    assert await db.write(store.press, card, "ap:x:1", 42, on_callback) == "Approved."
    [press] = pressed
    assert (press.user_id, press.chat_id, press.message_id, press.private) == (
        42,
        CHAT_ID,
        card,
        True,
    )


async def test_a_file_is_kept_under_its_hash_for_the_link(db: Database, tmp_path: Path) -> None:
    outbox = _outbox(db, tmp_path)
    source = tmp_path / "report.csv"
    source.write_bytes(b"day,steps\n")
    message = await outbox.send_document(CHAT_ID, str(source), "report.csv", caption="Week 3")
    source.unlink()  # the outgoing folder may be emptied: the page's copy stays
    name, digest = await db.read(store.file_of, message)
    assert name == "report.csv" and (tmp_path / "files" / digest).read_bytes() == b"day,steps\n"


def test_only_raster_images_are_shown_in_the_page() -> None:
    assert [inline_type(n) for n in ("a.png", "b.JPG", "c.webp", "d.gif")] == [
        "image/png",
        "image/jpeg",
        "image/webp",
        "image/gif",
    ]
    # An SVG or an HTML file could carry script: a download, never a page of this origin.
    assert [inline_type(n) for n in ("e.svg", "f.html", "g.xhtml", "h")] == [None] * 4


def test_long_text_is_split_at_a_paragraph() -> None:
    text = "a" * 20_000 + "\n\n" + "b" * 20_000
    assert split_text(text) == ["a" * 20_000, "b" * 20_000]


async def test_the_channel_needs_the_dashboard(tmp_path: Path) -> None:
    import contextlib

    config = config_class().model_validate({"webchat": {"enabled": True}})
    channel = WebChatChannel()
    assert channel.enabled(config)
    [check] = channel.checks(config, None)
    assert not check.ok and check.detail == NEEDS_DASHBOARD

    async def uncertain(*args: Any) -> None: ...

    async with contextlib.AsyncExitStack() as stack:
        ctx = ChannelContext(config, config.secret_source({}), stack, uncertain, Redactor())
        with pytest.raises(ConfigProblem, match="dashboard"):
            await channel.open(ctx)


def test_without_webchat_none_of_it_is_loaded() -> None:
    """The list names the channel; its pages, outbox and store (aiohttp's server side, jinja2)
    load only when it opens."""
    code = (
        "import sys, json, agentd.channels, agentd.daemon.process; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('agentd.webchat'))))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    # The entry, its ids, and what it brings through the door (its section, its table's SQL).
    assert json.loads(run.stdout) == [
        "agentd.webchat",
        "agentd.webchat.channel",
        "agentd.webchat.config",
        "agentd.webchat.ids",
        "agentd.webchat.schema",
    ]


def test_the_dashboard_names_no_channel() -> None:
    """The dashboard mounts whatever pages open channels hand it (`WebPages`): it imports no
    channel's package, so a channel served in the browser is still its own package."""
    import ast

    from agentd.channels import packages

    root = Path(__file__).resolve().parents[1] / "agentd" / "dashboard"
    named = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            named += [
                f"{path.name}:{node.lineno} {m}"
                for m in modules
                if any(m.startswith(f"agentd.{p}") for p in packages())
            ]
    assert not named, named


async def test_the_transcript_follows_the_history_retention(db: Database, tmp_path: Path) -> None:
    """With `[retention] message_days`, the daily run prunes the page's older messages (the
    channel's own table, declared through the channel door), in short writes, and a file goes
    with the last message that named it, unless the same file was sent again meanwhile."""
    import os

    from agentd.channels import kept_tables
    from agentd.webchat.channel import OpenWebChat
    from tests.retention_support import daily_run

    config = Config.model_validate(
        {
            "storage": {"path": str(db.path)},
            "retention": {"message_days": 1, "batch_size": 10},
        }
    )
    chat = OpenWebChat(config)
    chat.workflows(db)
    for name in ("old.csv", "again.csv"):
        source = tmp_path / name
        source.write_bytes(name.encode())
        await chat.outbox.send_document(CHAT_ID, str(source), name)
    for n in range(25):
        await chat.outbox.send_text(CHAT_ID, f"old {n}")
    await db.write(lambda c: c.execute("UPDATE webchat_messages SET created_at = 0"))
    files = chat.outbox.files_dir
    for kept in files.iterdir():
        os.utime(kept, (0, 0))  # written as long ago as their messages
    await chat.outbox.send_text(CHAT_ID, "new")
    # The same file sent again: kept anew before its message is written (it is not, here).
    keep_file(str(tmp_path / "again.csv"), files)
    out = await daily_run(db, config.retention, 10 * 86400.0, tables=kept_tables(config))
    assert out.removed["webchat_messages"] == 27
    left = await db.read(lambda c: c.execute("SELECT text FROM webchat_messages").fetchall())
    assert [r[0] for r in left] == ["new"]
    again = hashlib.sha256(b"again.csv").hexdigest()
    assert [p.name for p in files.iterdir()] == [again]


async def test_only_the_answer_ends_the_answer_so_far(db: Database, tmp_path: Path) -> None:
    """A message sent while an answer streams (a command's reply, a reminder) leaves the
    answer so far showing; the answer it was streamed for takes its place."""
    outbox = _outbox(db, tmp_path)
    assert await outbox.send_draft(CHAT_ID, 7, "the answer so")
    await outbox.send_text(CHAT_ID, "the help")
    assert outbox.hub.state()["draft"] == "the answer so"
    await outbox.send_text(CHAT_ID, "the answer so far", draft=7)
    assert outbox.hub.state()["draft"] == ""


def test_the_outbox_takes_what_the_contract_passes() -> None:
    """Every method of `chat.outbox.Outbox` with the same parameters here (a keyword the core
    starts passing, such as a draft's `reply_to`, would otherwise fail the turn)."""
    import inspect

    from agentd.chat.outbox import Outbox

    for name, member in vars(Outbox).items():
        if name.startswith("_") or not callable(member):
            continue
        ours = inspect.signature(getattr(WebOutbox, name)).parameters
        theirs = inspect.signature(member).parameters
        assert [(p.name, p.kind) for p in ours.values()] == [
            (p.name, p.kind) for p in theirs.values()
        ], name


async def test_a_page_open_across_a_retention_that_emptied_the_transcript_sees_what_follows(
    db: Database, tmp_path: Path
) -> None:
    """An open page (or one reconnecting with `Last-Event-ID`) asks for the changes after the
    newest it saw. Retention may remove every message, the newest included (a quiet month
    with `message_days` set): what is written next must still come after that cursor, under
    an id no earlier message had, or the page would never show it."""
    from agentd.webchat.kept import prune_messages

    outbox = _outbox(db, tmp_path)
    for n in range(3):
        await outbox.send_text(CHAT_ID, f"old {n}")
    seen = (await db.read(store.changes, 0))[-1]
    await db.write(lambda c: c.execute("UPDATE webchat_messages SET created_at = 0"))
    assert (await db.write(prune_messages, 1.0, 100))[0] == 3
    new = await outbox.send_text(CHAT_ID, "after the quiet month")
    shown = await db.read(store.changes, seen["seq"])
    assert [m["text"] for m in shown] == ["after the quiet month"]
    assert new > seen["id"]
