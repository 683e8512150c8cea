"""The workspace tools as the agent sees them: risks, at-most-once writes, taint, per-user
folders, and send_file producing a file for the chat."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from agentd.chat.outfiles import OutgoingFile
from agentd.config import Config
from agentd.db import Database
from agentd.hands.files import Workspaces, workspace_tools
from agentd.tools.base import CallState, ToolContext, ToolError
from agentd.tools.policy import call_risk


def _config(tmp_path: Path) -> Config:
    return Config.model_validate(
        {
            "storage": {"path": str(tmp_path / "agentd.db")},
            "access": {"allowed_user_ids": [7]},
            "tools": {"workspace": {"path": str(tmp_path / "ws")}},
        }
    )


def test_risks_at_most_once_and_egress(tmp_path: Path) -> None:
    tools = {t.name: t for t in workspace_tools(_config(tmp_path), db=None)}  # type: ignore[arg-type]
    assert {n: t.risk for n, t in tools.items()} == {
        "list_files": "low",
        "read_file": "low",
        "write_file": "medium",
        "edit_file": "medium",
        "delete_file": "high",
        "send_file": "low",
    }
    for name in ("write_file", "edit_file", "delete_file"):
        assert tools[name].at_most_once and tools[name].egress, name
    for name in ("list_files", "read_file", "send_file"):
        assert not tools[name].at_most_once, name
    write = tools["write_file"]
    args = write.parse_args({"path": "a.txt", "content": "x"})
    assert call_risk(write, args, CallState()).risk == "medium"
    tainted = call_risk(write, args, CallState(tainted_by=("https://x.example",)))
    assert tainted.risk == "high" and "x.example" in tainted.reason


def test_owners_share_the_top_and_paired_users_get_their_own(tmp_path: Path) -> None:
    spaces = Workspaces.from_config(_config(tmp_path))
    assert spaces.for_user(7).root == tmp_path / "ws"
    paired = spaces.ensure(99)
    assert paired.root == tmp_path / "ws" / "users" / "99" and paired.root.is_dir()


def test_write_then_send_file_through_the_tools(tmp_path: Path) -> None:
    async def scenario() -> None:
        db = await Database.open(tmp_path / "agentd.db")
        try:
            tools = {t.name: t for t in workspace_tools(_config(tmp_path), db)}
            ctx = ToolContext(
                chat_id=7, chat_kind="private", user_id=7, instance_id="i1", tool_use_id="u1"
            )
            wrote = await tools["write_file"].fn(
                ctx, tools["write_file"].parse_args({"path": "out/report.txt", "content": "hello"})
            )
            assert wrote == "Wrote 5 bytes to out/report.txt."
            sent = await tools["send_file"].fn(
                ctx, tools["send_file"].parse_args({"path": "out/report.txt"})
            )
            assert isinstance(sent, OutgoingFile) and sent.data == b"hello"
            assert sent.filename == "report.txt"
            rows = await db.fetchall("SELECT kind, detail FROM audit")
            assert [r[0] for r in rows] == ["workspace"] and "out/report.txt" in rows[0][1]
        finally:
            await db.close()

    asyncio.run(scenario())
    assert os.path.isfile(tmp_path / "ws" / "out" / "report.txt")


def test_save_sent_file_copies_a_document_of_this_chat_only(tmp_path: Path) -> None:
    downloads: list[str] = []

    async def download(file_id: str, limit: int) -> bytes:
        downloads.append(file_id)
        return b"%PDF-1.4 sent by the user"

    async def scenario() -> None:
        db = await Database.open(tmp_path / "agentd.db")
        try:
            await db.execute(
                "INSERT INTO chat_documents (id, chat_id, user_id, file_id, file_name, format, "
                "sha256, size, title, created_at) VALUES ('u5', 7, 7, 'FILE5', 'a.pdf', 'pdf', "
                "'x', 25, 'A', 0)"
            )
            tools = {t.name: t for t in workspace_tools(_config(tmp_path), db, download)}
            save = tools["save_sent_file"]
            assert save.risk == "medium" and save.at_most_once
            ctx = ToolContext(
                chat_id=7, chat_kind="private", user_id=7, instance_id="i1", tool_use_id="u1"
            )
            said = await save.fn(ctx, save.parse_args({"document_id": "u5", "path": "in/a.pdf"}))
            assert "in/a.pdf" in said and downloads == ["FILE5"]
            other = ToolContext(
                chat_id=8, chat_kind="private", user_id=8, instance_id="i2", tool_use_id="u2"
            )
            try:
                await save.fn(other, save.parse_args({"document_id": "u5", "path": "b.pdf"}))
            except ToolError as exc:
                assert "no file" in str(exc)
            else:
                raise AssertionError("another chat's document was saved")
        finally:
            await db.close()

    asyncio.run(scenario())
    assert (tmp_path / "ws" / "in" / "a.pdf").read_bytes().startswith(b"%PDF")
    assert not (tmp_path / "ws" / "users" / "8" / "b.pdf").exists()


def test_an_owners_tool_of_the_same_name_keeps_its_place(tmp_path: Path) -> None:
    from agentd.config import ToolsConfig
    from agentd.tools import ToolRegistry, tool

    @tool(risk="high")
    async def delete_file(path: str) -> str:
        """The owner's own delete_file from a plugin."""
        return path

    hands = workspace_tools(_config(tmp_path), db=None)  # type: ignore[arg-type]
    config = ToolsConfig(risk={"write_file": "high"})
    registry, problems = ToolRegistry.build(config, builtins=[], extra=[delete_file], late=hands)
    assert registry.get("delete_file") is delete_file
    assert registry.get("write_file").risk == "high"  # type: ignore[union-attr]
    said = [str(p) for p in problems]
    assert any("delete_file" in p and "not registered" in p for p in said)
    assert not any("unknown tool" in p for p in said)
