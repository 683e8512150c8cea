"""Links planted in the workspace are never followed: a paired user's folder replaced by a link
to `/` (or a dangling link where an attachment goes) is refused by the file tools, the
shell and the mail attachment writer; the owners' sandbox cannot rename users' folders."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from agentd.config import Config
from agentd.hands.files import Workspaces, workspace_tools
from agentd.hands.sandbox import Limits, Sandbox, SandboxUnavailable, probe, run_sandboxed
from agentd.hands.workspace import WorkspaceError
from agentd.mail.message import save_attachment
from agentd.tools.base import ToolContext, ToolError
from tests.hands_support import reachable_dir

OWNER, PAIRED = 7, 99
PROBLEM = probe(Sandbox(), reachable_dir())
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox here: {PROBLEM}")


@pytest.fixture
def ws() -> Iterator[Path]:
    root = reachable_dir()
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


def _spaces(ws: Path) -> Workspaces:
    config = Config.model_validate(
        {
            "storage": {"path": str(ws.parent / "agentd.db")},
            "access": {"allowed_user_ids": [OWNER]},
            "tools": {"workspace": {"path": str(ws)}},
        }
    )
    return Workspaces.from_config(config)


def _plant(ws: Path, target: str = "/") -> None:
    Workspaces.ensure_base(_spaces(ws))
    users = ws / "users"
    if (users / str(PAIRED)).exists():
        shutil.rmtree(users / str(PAIRED))
    os.symlink(target, users / str(PAIRED))


def test_a_planted_user_folder_link_is_refused_by_every_file_operation(ws: Path) -> None:
    _plant(ws)
    spaces = _spaces(ws)
    for attempt in (
        lambda w: w.list(""),
        lambda w: w.read("etc/passwd"),
        lambda w: w.write("pwned.txt", b"x"),
        lambda w: w.delete("etc", 0.0),
    ):
        with pytest.raises(WorkspaceError, match="link or not a folder"):
            attempt(spaces.ensure(PAIRED))
    assert not Path("/pwned.txt").exists()
    assert os.path.islink(ws / "users" / str(PAIRED))  # refused, left for the owner to remove


def test_a_planted_users_link_is_refused_too(ws: Path) -> None:
    spaces = _spaces(ws)
    spaces.base().ensure()
    os.symlink("/", ws / "users")
    with pytest.raises(WorkspaceError, match="link or not a folder"):
        spaces.ensure(PAIRED)


async def test_the_tools_refuse_a_planted_link(ws: Path) -> None:
    _plant(ws)
    config = Config.model_validate(
        {
            "storage": {"path": str(ws.parent / "agentd.db")},
            "access": {"allowed_user_ids": [OWNER]},
            "tools": {"workspace": {"path": str(ws)}},
        }
    )
    tools = {t.name: t for t in workspace_tools(config, db=None)}  # type: ignore[arg-type]
    ctx = ToolContext(
        chat_id=PAIRED, user_id=PAIRED, instance_id="i", tool_use_id="t", chat_kind="private"
    )
    for name, args in (
        ("list_files", {"path": ""}),
        ("read_file", {"path": "etc/hostname"}),
        ("send_file", {"path": "etc/hostname"}),
    ):
        tool = tools[name]
        with pytest.raises(ToolError, match="link"):
            await tool.fn(ctx, tool.parse_args(args))


@needs_bwrap
def test_the_shell_refuses_a_planted_user_folder(ws: Path) -> None:
    _plant(ws)
    with pytest.raises(WorkspaceError, match="link or not a folder"):
        asyncio.run(
            run_sandboxed(
                "ls /workspace",
                _spaces(ws).for_user(PAIRED),
                sandbox=Sandbox(),
                limits=Limits(wall_seconds=10),
            )
        )


@needs_bwrap
def test_the_owners_shell_cannot_rename_or_replace_a_users_folder(ws: Path) -> None:
    spaces = _spaces(ws)
    spaces.ensure(PAIRED)
    if os.geteuid() == 0:
        os.chown(ws / "users" / str(PAIRED), 65534, 65534)
    result = asyncio.run(
        run_sandboxed(
            f"mv users/{PAIRED} gone; rm -rf users/{PAIRED}; ln -s / users/{PAIRED}x; "
            f"touch users/{PAIRED}/x; ls users",
            spaces.for_user(OWNER),
            sandbox=Sandbox(),
            limits=Limits(wall_seconds=10),
        )
    )
    assert "Read-only file system" in result.output or "Permission denied" in result.output
    assert (ws / "users" / str(PAIRED)).is_dir() and not (ws / "users" / str(PAIRED)).is_symlink()
    # (mv falls back to a copy across the read-only mount; the original stays where it was)
    assert not os.path.lexists(ws / "users" / f"{PAIRED}x")


@needs_bwrap
def test_a_skill_bind_that_is_a_link_is_refused(ws: Path, tmp_path: Path) -> None:
    link = ws.parent / "skill-link"
    os.symlink("/etc", link)
    with pytest.raises((OSError, SandboxUnavailable)):
        asyncio.run(
            run_sandboxed(
                "ls /skill",
                ws,
                sandbox=Sandbox(),
                limits=Limits(wall_seconds=10),
                binds_ro=[(str(link), "/skill")],
            )
        )


def _mail_with_attachment(name: str) -> EmailMessage:
    msg = EmailMessage()
    msg["Subject"] = "invoice"
    msg.set_content("see attached")
    msg.add_attachment(b"%PDF-1.4", maintype="application", subtype="pdf", filename=name)
    return msg


def test_an_attachment_never_follows_a_dangling_link(tmp_path: Path) -> None:
    inbox = tmp_path / "ws" / "inbox"
    inbox.mkdir(parents=True)
    victim = tmp_path / "victim"
    os.symlink(victim, inbox / "invoice.pdf")  # dangling: a write through it would create it
    saved = save_attachment(_mail_with_attachment("invoice.pdf"), 1, inbox, tmp_path / "ws")
    assert saved == inbox / "invoice-2.pdf" and saved.read_bytes() == b"%PDF-1.4"
    assert not victim.exists() and os.path.islink(inbox / "invoice.pdf")


def test_an_attachment_folder_link_inside_the_workspace_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, ws / "inbox")
    with pytest.raises(ValueError, match="link or not a folder"):
        save_attachment(_mail_with_attachment("a.pdf"), 1, ws / "inbox", ws)
    assert list(outside.iterdir()) == []


def test_as_root_an_unreachable_default_workspace_moves_to_var_lib(ws: Path) -> None:
    from agentd.hands.files import ROOT_DEFAULT, reachable, workspace_root

    home = ws.parent / "root-home"  # below folders the sandbox user may pass
    home.mkdir(mode=0o700)
    config = Config.model_validate({"storage": {"path": str(home / "agentd.db")}})
    if os.geteuid() != 0:
        assert workspace_root(config) == home / "workspace"  # commands run as agentd itself
        return
    assert not reachable(home / "workspace", 65534)
    assert workspace_root(config) == ROOT_DEFAULT
    home.chmod(0o711)
    assert workspace_root(config) == home / "workspace"
    chosen = Config.model_validate(
        {
            "storage": {"path": str(home / "agentd.db")},
            "tools": {"workspace": {"path": str(home / "mine")}},
        }
    )
    assert workspace_root(chosen) == home / "mine"  # the owner's choice stands
