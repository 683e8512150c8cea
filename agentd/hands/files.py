"""The workspace file tools: list, read, write, edit, delete (to the trash), send, save.

Reads are low risk, writes medium, deletes high (config may change any of them). Writes are
at-most-once and `egress` (a tainted turn must not leave instructions behind unasked); every
write is audited (kind `workspace`) with its user, path and size.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agentd.chat.outfiles import MAX_UPLOAD_BYTES, OutgoingFile
from agentd.chat.sent_files import holds_sent_files
from agentd.config import Config
from agentd.db import Database
from agentd.hands.workspace import Workspace, WorkspaceError, open_dir
from agentd.ledger import audit
from agentd.tools.base import Tool, ToolContext, ToolError
from agentd.tools.toolset import Toolset

# What a read shows the model at most; the rest is there for read_file with an offset.
READ_CHARS = 60_000
Download = Callable[[str, int], Awaitable[bytes]]


def sandbox_ids(config: Config) -> tuple[int, int] | None:
    """The uid/gid commands run as when agentd is root (files must be theirs to change)."""
    shell = config.tools.shell
    if os.geteuid() != 0 or shell.sandbox != "bwrap" or not shell.run_as:
        return None
    try:
        entry = pwd.getpwnam(shell.run_as)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


# Where the workspace goes when agentd runs as root and the folder beside its database is out
# of the sandbox user's reach (a config in /root, 0700): the commands run as that user and
# bwrap must be able to reach the folder it mounts.
ROOT_DEFAULT = Path("/var/lib/agentd/workspace")


def workspace_root(config: Config) -> Path:
    """The workspace folder: `[tools.workspace] path`, else beside the database, else (as root,
    where the sandbox user could not reach that) /var/lib/agentd/workspace."""
    chosen = config.workspace_dir
    ids = sandbox_ids(config)
    if config.tools.workspace.path or ids is None or reachable(chosen, ids[0]):
        return chosen
    return ROOT_DEFAULT


def reachable(folder: Path, uid: int) -> bool:
    """Whether `uid` may pass through every existing folder above `folder` (o+x, or its own);
    missing ones are made 0755 by mkdir's parents."""
    for parent in folder.absolute().parents:
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            continue
        if st.st_uid != uid and not st.st_mode & 0o001:
            return False
    return True


@dataclass(frozen=True)
class Workspaces:
    """The allowlisted users share the workspace folder; every other (paired) user has
    users/<id>."""

    root: Path
    allowlisted: frozenset[int]  # access.allowed_user_ids
    max_bytes: int
    trash_days: float
    chown: tuple[int, int] | None  # see Workspace.chown

    @classmethod
    def from_config(cls, config: Config) -> Workspaces:
        ws = config.tools.workspace
        return cls(
            root=workspace_root(config),
            allowlisted=frozenset(config.access.allowed_user_ids),
            max_bytes=ws.max_file_bytes,
            trash_days=ws.trash_days,
            chown=sandbox_ids(config),
        )

    def for_user(self, user_id: int) -> Workspace:
        sub = () if user_id in self.allowlisted else ("users", str(user_id))
        return Workspace(
            self.root,
            max_bytes=self.max_bytes,
            trash_days=self.trash_days,
            chown=self.chown,
            sub=sub,
        )

    def base(self) -> Workspace:
        return Workspace(
            self.root, max_bytes=self.max_bytes, trash_days=self.trash_days, chown=self.chown
        )

    def purge_trash(self, now: float) -> int:
        """Trashed items older than `trash_days`, in the shared folder and every users/<id>
        (the daily retention run; a delete also purges its own workspace's trash)."""
        if not self.root.is_dir():
            return 0
        removed = self.base().purge_trash(now)
        try:
            names = os.listdir(self.root / "users")
        except OSError:
            return removed
        for name in names:
            if name.isascii() and name.isdecimal():
                try:  # each opened without following a link (Workspace)
                    removed += self.for_user(int(name)).purge_trash(now)
                except (OSError, WorkspaceError):
                    continue
        return removed

    def ensure_base(self) -> Workspace:
        """The shared folder and its users/ (made by agentd, never by a command: the owners'
        sandbox sees users/ read-only), 0711 so the sandbox's user passes but cannot list it."""
        base = self.base()
        base.ensure()
        fd = base.open_root()
        try:
            users = open_dir(fd, "users", create=True, mode=0o711)
            try:
                st = os.fstat(users)
                if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != 0o711:
                    os.fchmod(users, 0o711)
            finally:
                os.close(users)
        finally:
            os.close(fd)
        return base

    def ensure(self, user_id: int) -> Workspace:
        self.ensure_base()
        mine = self.for_user(user_id)
        if mine.sub:
            mine.ensure()  # users/ and users/<id>, each opened without following a link
        return mine


class ListArgs(BaseModel):
    path: str = Field(default="", description="A folder inside the workspace; empty: its top.")


class PathArgs(BaseModel):
    path: str = Field(
        description="A workspace path, e.g. notes/todo.md.",
        min_length=1,
        max_length=1024,
    )


class ReadArgs(PathArgs):
    offset: int = Field(default=0, ge=0, description="Start at this character (long files).")


class WriteArgs(PathArgs):
    content: str = Field(description="The whole new content of the file (UTF-8 text).")
    overwrite: bool = Field(default=True, description="False: fail if the file exists.")


class EditArgs(PathArgs):
    old_text: str = Field(description="The exact text to replace; must occur exactly once.")
    new_text: str = Field(description="What replaces it.")


class SaveSentArgs(BaseModel):
    document_id: str = Field(
        description="The document id shown with the file, e.g. u123.", max_length=40
    )
    path: str = Field(description="Where to save it inside the workspace.", max_length=1024)


def _render_list(path: str, entries: list[Any]) -> str:
    if not entries:
        return f"{path or '(workspace)'} is empty."
    lines = [
        f"{'📁' if e.kind == 'folder' else '·'} {e.name}"
        f"{'' if e.kind == 'folder' else f'  ({e.kind}, {e.size} bytes)'}"
        for e in entries
    ]
    return "\n".join([f"{path or '(workspace)'}:", *lines])


def _render_read(data: Any, offset: int) -> str:
    if data.text is None:
        return (
            f"{data.path} is a binary file ({data.mime}, {data.size} bytes); its bytes "
            "are not shown. send_file can send it to the user."
        )
    chunk = data.text[offset : offset + READ_CHARS]
    more = len(data.text) - offset - len(chunk)
    tail = f"\n[… {more} more characters: read again with offset={offset + len(chunk)}]"
    return chunk + (tail if more > 0 else "")


async def _audit(db: Database, ctx: ToolContext, op: str, path: str, size: int) -> None:
    await db.write(
        lambda conn: audit.record(
            conn,
            "workspace",
            chat_id=ctx.chat_id,
            user_id=ctx.user_id,
            instance_id=ctx.instance_id,
            source_key=f"{ctx.instance_id}:ws:{ctx.tool_use_id}",
            detail={"op": op, "path": path[:300], "bytes": size},
        )
    )


async def _in_workspace(
    spaces: Workspaces, ctx: ToolContext, fn: Callable[[Workspace], Any]
) -> Any:
    """Run `fn` on the caller's workspace (made on first use), off the event loop."""

    def run() -> Any:
        return fn(spaces.ensure(ctx.user_id))

    return await asyncio.to_thread(run)


GROUP_REFUSAL = (
    "Workspace files are private: the file tools and the shell do not work in group chats, "
    "where every member would read the answer. Tell the user to ask in a private chat."
)


def not_in_groups(ctx: ToolContext) -> str | None:
    """A workspace is its user's: in a group every member reads what a tool returns."""
    return None if ctx.private else GROUP_REFUSAL


def workspace_tools(config: Config, db: Database, download: Download | None = None) -> list[Tool]:
    """The file tools, bound to the workspaces and the database (for the audit)."""
    spaces = Workspaces.from_config(config)
    # A WorkspaceError says what is wrong with the path or the file, in words for the model.
    files = Toolset(timeout=60.0, guard=not_in_groups, errors=(WorkspaceError,))
    _reading_tools(files, spaces)
    _writing_tools(files, spaces, db, config.tools.workspace.trash_days)
    _sending_tool(files, spaces)
    if download is not None:
        _save_sent_tool(files, spaces, db, download, config.tools.workspace.max_file_bytes)
    return files.tools()


def _reading_tools(files: Toolset, spaces: Workspaces) -> None:
    # A file's name and contents are whoever wrote them (a received archive, a download, a
    # skill's script): outside content, so reading them taints.
    @files.tool(risk="low", taints=True)
    async def list_files(ctx: ToolContext, args: ListArgs) -> str:
        """List a folder of your workspace (names, kinds, sizes)."""
        entries = await _in_workspace(spaces, ctx, lambda w: w.list(args.path))
        return _render_list(args.path, entries)

    @files.tool(risk="low", taints=True)
    async def read_file(ctx: ToolContext, args: ReadArgs) -> str:
        """Read a text file from your workspace (binary files: size and type only)."""
        data = await _in_workspace(spaces, ctx, lambda w: w.read(args.path))
        return _render_read(data, args.offset)


# Writes are at-most-once (a crash mid-write is reported, never repeated) and egress: a
# tainted turn must not leave instructions behind in a file unasked.
def _writing_tools(files: Toolset, spaces: Workspaces, db: Database, trash_days: float) -> None:
    @files.tool(risk="medium", egress=True, at_most_once=True)
    async def write_file(ctx: ToolContext, args: WriteArgs) -> str:
        """Create or replace a text file in your workspace."""
        data = args.content.encode("utf-8")
        size = await _in_workspace(
            spaces, ctx, lambda w: w.write(args.path, data, overwrite=args.overwrite)
        )
        await _audit(db, ctx, "write", args.path, size)
        return f"Wrote {size} bytes to {args.path}."

    @files.tool(
        risk="medium",
        egress=True,
        at_most_once=True,
        description="Replace one exact span of text in a workspace file (fails when "
        "old_text is missing or not unique).",
    )
    async def edit_file(ctx: ToolContext, args: EditArgs) -> str:
        size = await _in_workspace(
            spaces, ctx, lambda w: w.edit(args.path, args.old_text, args.new_text)
        )
        await _audit(db, ctx, "edit", args.path, size)
        return f"Edited {args.path} (now {size} bytes)."

    @files.tool(risk="high", egress=True, at_most_once=True)
    async def delete_file(ctx: ToolContext, args: PathArgs) -> str:
        """Move a workspace file or folder to the trash (kept for days, then purged)."""
        where = await _in_workspace(spaces, ctx, lambda w: w.delete(args.path, ctx.now()))
        await _audit(db, ctx, "delete", args.path, 0)
        return f"Moved {args.path} to the trash ({where}); it is kept {trash_days:g} days."


def _sending_tool(files: Toolset, spaces: Workspaces) -> None:
    @files.tool(risk="low")
    async def send_file(ctx: ToolContext, args: PathArgs) -> OutgoingFile:
        """Send a workspace file to the user in this chat."""
        data = await _in_workspace(spaces, ctx, lambda w: w.read(args.path, limit=MAX_UPLOAD_BYTES))
        return OutgoingFile(filename=Path(args.path).name, data=data.data)


def _save_sent_tool(
    files: Toolset, spaces: Workspaces, db: Database, download: Download, max_bytes: int
) -> None:
    @files.tool(risk="medium", egress=True, at_most_once=True, offered=holds_sent_files)
    async def save_sent_file(ctx: ToolContext, args: SaveSentArgs) -> str:
        """Save a file the user sent in this chat (by its document id) into the workspace."""
        row = await db.read(
            lambda conn: conn.execute(
                "SELECT chat_id, file_id FROM chat_documents WHERE id = ?", (args.document_id,)
            ).fetchone()
        )
        if row is None or row[0] != ctx.chat_id:
            raise ToolError(f"no file {args.document_id!r} was sent in this chat")
        data = await download(row[1], max_bytes)
        size = await _in_workspace(spaces, ctx, lambda w: w.write(args.path, data))
        await _audit(db, ctx, "save_sent", args.path, size)
        return f"Saved the file the user sent to {args.path} ({size} bytes)."
