"""The workspace keeps every file tool inside its folder: each escape is tried and refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.hands.workspace import TRASH, Workspace, WorkspaceError


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    space = Workspace(tmp_path / "ws", max_bytes=10_000, trash_days=7, chown=None)
    space.ensure()
    (tmp_path / "secret.txt").write_text("outside secret")
    return space


def test_write_read_edit_list_roundtrip(ws: Workspace) -> None:
    assert ws.write("notes/todo.md", b"- milk\n- eggs\n") == 14
    assert ws.read("notes/todo.md").text == "- milk\n- eggs\n"
    ws.edit("notes/todo.md", "eggs", "bread")
    assert ws.read("./notes//todo.md").text == "- milk\n- bread\n"
    names = [(e.name, e.kind) for e in ws.list("")]
    assert names == [("notes", "folder")]
    assert [e.name for e in ws.list("notes")] == ["todo.md"]


@pytest.mark.parametrize(
    "path",
    ["../secret.txt", "notes/../../secret.txt", "/etc/passwd", "~/x", "..", "a/../../b"],
)
def test_dotdot_and_absolute_paths_are_refused(ws: Workspace, path: str) -> None:
    with pytest.raises(WorkspaceError):
        ws.read(path)
    with pytest.raises(WorkspaceError):
        ws.write(path, b"x")


def test_symlinks_are_never_followed(ws: Workspace, tmp_path: Path) -> None:
    os.symlink(tmp_path / "secret.txt", ws.root / "link.txt")
    os.symlink(tmp_path, ws.root / "out")
    os.symlink("/proc/self/root", ws.root / "rootlink")
    for path in ("link.txt", "out/secret.txt", "rootlink/etc/passwd"):
        with pytest.raises(WorkspaceError, match="symlink"):
            ws.read(path)
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.write("out/new.txt", b"x")
    assert not (tmp_path / "new.txt").exists()
    # Writing over the link replaces the link itself; the file it pointed at is untouched.
    ws.write("link.txt", b"replaced")
    assert (tmp_path / "secret.txt").read_text() == "outside secret"
    assert not (ws.root / "link.txt").is_symlink()


def test_proc_self_root_and_special_files(ws: Workspace) -> None:
    with pytest.raises(WorkspaceError):
        ws.read("proc/self/root/etc/passwd")
    os.mkfifo(ws.root / "fifo")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        ws.read("fifo")  # must not hang waiting for a writer


def test_hard_links_are_refused(ws: Workspace, tmp_path: Path) -> None:
    os.link(tmp_path / "secret.txt", ws.root / "hard.txt")
    with pytest.raises(WorkspaceError, match="hard links"):
        ws.read("hard.txt")
    ws.write("hard.txt", b"new")  # replaces the name, not the shared inode
    assert (tmp_path / "secret.txt").read_text() == "outside secret"


def test_sizes_binary_and_edit_uniqueness(ws: Workspace) -> None:
    with pytest.raises(WorkspaceError, match="limited"):
        ws.write("big.bin", b"x" * 10_001)
    (ws.root / "huge.txt").write_bytes(b"y" * 20_000)
    with pytest.raises(WorkspaceError, match="limit"):
        ws.read("huge.txt")
    ws.write("pic.png", b"\x89PNG\r\n\x1a\n\x00\x00")
    data = ws.read("pic.png")
    assert data.text is None and data.mime == "image/png" and data.size == 10
    ws.write("t.txt", b"a a b")
    with pytest.raises(WorkspaceError, match="occurs 2 times"):
        ws.edit("t.txt", "a", "c")
    with pytest.raises(WorkspaceError, match="does not occur"):
        ws.edit("t.txt", "zz", "c")
    with pytest.raises(WorkspaceError, match="not a text file"):
        ws.edit("pic.png", "P", "Q")


def test_delete_moves_to_trash_and_purges_after_the_kept_days(ws: Workspace) -> None:
    ws.write("old/a.txt", b"a")
    where = ws.delete("old/a.txt", now=1_000_000)
    assert where.startswith(f"{TRASH}/1000000-")
    assert not (ws.root / "old" / "a.txt").exists()
    assert ws.read(where).text == "a"
    assert TRASH not in [e.name for e in ws.list("")]
    with pytest.raises(WorkspaceError):
        ws.delete("../secret.txt", now=1_000_000)
    assert ws.purge_trash(now=1_000_000 + 6 * 86400) == 0
    assert ws.purge_trash(now=1_000_000 + 8 * 86400) == 1
    with pytest.raises(WorkspaceError):
        ws.read(where)


def test_a_folder_swapped_for_a_symlink_is_not_followed(ws: Workspace, tmp_path: Path) -> None:
    ws.write("d/f.txt", b"inside")
    (ws.root / "d" / "f.txt").unlink()
    (ws.root / "d").rmdir()
    os.symlink(tmp_path, ws.root / "d")  # what a sandboxed command could do between calls
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.read("d/secret.txt")
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.list("d")
