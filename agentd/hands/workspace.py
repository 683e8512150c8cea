"""The workspace: one folder the agent may read and write, and no byte outside it.

Every path is walked one component at a time from an open descriptor of the workspace with
O_NOFOLLOW (openat-style), so no `..`, absolute path, symlink (wherever it points, even to
/proc/self/root) or rename race can lead outside. Files with more than one hard link and
anything that is not a regular file (FIFOs, devices, sockets) are refused: a link made from
inside could point at a file elsewhere on the same disk, and a FIFO would hang a read.
Everything here is blocking and runs off the event loop (`asyncio.to_thread` in tools.py).
"""

from __future__ import annotations

import contextlib
import errno
import mimetypes
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TRASH = ".trash"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_PARTS = 64
_MAX_LIST = 500
_MAGIC = {
    b"%PDF": "application/pdf",
    b"\x89PNG": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF8": "image/gif",
    b"PK\x03\x04": "application/zip",
    b"\x7fELF": "application/x-executable",
    b"\x1f\x8b": "application/gzip",
}


class WorkspaceError(Exception):
    """A request the workspace refuses; the message is for the model (no host paths)."""


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # file | folder | link | other
    size: int


@dataclass(frozen=True)
class FileData:
    path: str
    data: bytes
    size: int
    mime: str
    text: str | None  # None: binary


def split(path: str) -> list[str]:
    """The workspace-relative parts of `path`; refuses absolute paths, `..` and odd names."""
    if "\x00" in path:
        raise WorkspaceError("a path cannot contain a NUL byte")
    if path.startswith(("/", "~")):
        raise WorkspaceError(
            f"{path!r} is absolute: give a path inside the workspace, like notes/todo.md"
        )
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise WorkspaceError(f"{path!r} leaves the workspace ('..' is not allowed)")
    if len(parts) > _MAX_PARTS:
        raise WorkspaceError("that path is too deep")
    return parts


class Workspace:
    """One user's workspace folder (the allowlisted users share the top; paired users get
    users/<id>, given as `sub` below the shared `base`)."""

    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int,
        trash_days: float,
        chown: tuple[int, int] | None,
        sub: tuple[str, ...] = (),
    ) -> None:
        # `root` is the folder the owner configured; `sub` the parts below it that are this
        # user's folder. The configured folder is the owner's choice (it may be a link the
        # owner made); nothing below it is ever followed.
        self.base = root
        self.sub = sub
        self.root = root.joinpath(*sub)
        self.max_bytes = max_bytes
        self.trash_days = trash_days
        # The uid/gid that files the tools create are given to: the sandbox's user, so the
        # shell can change them (None: they stay agentd's).
        self.chown = chown

    def ensure(self) -> None:
        """Create the folder (0700: no one but agentd's user, or the sandbox's); every part
        below the configured folder is made and opened without following links."""
        self.base.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = self.open_root(create=True)
        try:
            st = os.fstat(fd)
            if self.chown is not None and (st.st_uid, st.st_gid) != self.chown:
                os.fchown(fd, *self.chown)
        finally:
            os.close(fd)

    # -- walking ---------------------------------------------------------------------------

    def open_root(self, *, create: bool = False) -> int:
        """A descriptor of this user's folder, reached without following any link below the
        configured folder (the caller closes it). `create` makes missing parts: the
        intermediate ones (users/) 0711, so the sandbox's user may pass but not list them."""
        try:
            fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            raise WorkspaceError("the workspace folder is missing; restart agentd") from None
        try:
            for i, part in enumerate(self.sub):
                last = i == len(self.sub) - 1
                nxt = open_dir(fd, part, create=create, mode=0o700 if last else 0o711)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_root(self) -> int:
        return self.open_root()

    @contextlib.contextmanager
    def _parent(self, path: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """(descriptor of the folder holding the last part, the last part's name)."""
        parts = split(path)
        if not parts:
            raise WorkspaceError("give a file name inside the workspace")
        fd = self._open_root()
        try:
            for i, part in enumerate(parts[:-1]):
                nxt = self._step(fd, part, "/".join(parts[: i + 1]), create)
                os.close(fd)
                fd = nxt
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def _step(self, fd: int, part: str, shown: str, create: bool) -> int:
        try:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise WorkspaceError(f"no folder {shown!r} in the workspace") from None
            os.mkdir(part, mode=0o755, dir_fd=fd)
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            if self.chown is not None:
                os.fchown(nxt, *self.chown)
        except OSError as exc:
            raise WorkspaceError(_why_not_folder(shown, exc)) from None
        return nxt

    @contextlib.contextmanager
    def _folder(self, path: str) -> Iterator[int]:
        if not split(path):
            fd = self._open_root()
            try:
                yield fd
            finally:
                os.close(fd)
            return
        with self._parent(path) as (parent, name):
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError as exc:
                raise WorkspaceError(_why_not_folder(path, exc)) from None
            try:
                yield fd
            finally:
                os.close(fd)

    def _open_file(self, parent: int, name: str, shown: str) -> int:
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer; refused just below.
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent
            )
        except FileNotFoundError:
            raise WorkspaceError(f"no file {shown!r} in the workspace") from None
        except OSError as exc:
            raise WorkspaceError(_why_not_file(shown, exc)) from None
        st = os.fstat(fd)
        problem = _refuse(st, shown)
        if problem:
            os.close(fd)
            raise WorkspaceError(problem)
        return fd

    # -- operations ------------------------------------------------------------------------

    def list(self, path: str = "") -> list[Entry]:
        with self._folder(path) as fd:
            entries = []
            with os.scandir(fd) as it:
                for item in it:
                    if item.name == TRASH and not split(path):
                        continue
                    st = item.stat(follow_symlinks=False)
                    kind = (
                        "folder"
                        if stat.S_ISDIR(st.st_mode)
                        else "file"
                        if stat.S_ISREG(st.st_mode)
                        else "link"
                        if stat.S_ISLNK(st.st_mode)
                        else "other"
                    )
                    entries.append(Entry(item.name, kind, st.st_size))
                    if len(entries) >= _MAX_LIST:
                        break
        return sorted(entries, key=lambda e: (e.kind != "folder", e.name))

    def read(self, path: str, *, limit: int | None = None) -> FileData:
        limit = self.max_bytes if limit is None else limit
        with self._parent(path) as (parent, name):
            fd = self._open_file(parent, name, path)
            try:
                size = os.fstat(fd).st_size
                if size > limit:
                    raise WorkspaceError(f"{path!r} is {size} bytes; the limit is {limit} bytes")
                data = _read_all(fd, limit + 1)
            finally:
                os.close(fd)
        if len(data) > limit:  # it grew while we read
            raise WorkspaceError(f"{path!r} is larger than the limit of {limit} bytes")
        return FileData(path, data, len(data), sniff(name, data), as_text(data))

    def write(self, path: str, data: bytes, *, overwrite: bool = True) -> int:
        if len(data) > self.max_bytes:
            raise WorkspaceError(
                f"that is {len(data)} bytes; files are limited to {self.max_bytes} bytes"
            )
        with self._parent(path, create=True) as (parent, name):
            self._check_target(parent, name, path, overwrite)
            tmp = f".{name[:100]}.{os.getpid()}.{time.monotonic_ns()}.part"
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o644,
                dir_fd=parent,
            )
            try:
                with os.fdopen(fd, "wb", closefd=False) as out:
                    out.write(data)
                    out.flush()
                    os.fsync(fd)
                if self.chown is not None:
                    os.fchown(fd, *self.chown)
                # The rename replaces the name itself: a symlink there is replaced, never
                # followed; a hard-linked file keeps its other name's content.
                os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent)
                raise
            finally:
                os.close(fd)
        return len(data)

    def _check_target(self, parent: int, name: str, shown: str, overwrite: bool) -> None:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise WorkspaceError(f"{shown!r} is a folder")
        if not overwrite:
            raise WorkspaceError(f"{shown!r} already exists")

    def edit(self, path: str, old: str, new: str) -> int:
        """Replace the one exact occurrence of `old`; refuse when it is missing or repeated."""
        current = self.read(path)
        if current.text is None:
            raise WorkspaceError(f"{path!r} is not a text file; it cannot be edited")
        if not old:
            raise WorkspaceError("old_text must not be empty")
        count = current.text.count(old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise WorkspaceError(
                f"old_text {where} in {path!r}; it must match exactly one span "
                "(include more surrounding text to make it unique)"
            )
        return self.write(path, current.text.replace(old, new, 1).encode("utf-8"))

    def delete(self, path: str, now: float) -> str:
        """Move a file or folder to the trash (kept `trash_days`); return its trash name."""
        if split(path) and split(path)[0] == TRASH:
            raise WorkspaceError("that is already in the trash")
        self.purge_trash(now)
        with self._parent(path) as (parent, name):
            try:
                os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                raise WorkspaceError(f"no file {path!r} in the workspace") from None
            # The clock's second, then a tie-breaker: two deletes of one path keep both copies.
            trash_name = f"{int(now)}-{time.time_ns() % 10**9:09d}-{'_'.join(split(path))}"[:240]
            with self._parent(f"{TRASH}/{trash_name}", create=True) as (trash, tname):
                os.rename(name, tname, src_dir_fd=parent, dst_dir_fd=trash)
        return f"{TRASH}/{trash_name}"

    def purge_trash(self, now: float) -> int:
        """Remove trashed items older than `trash_days` (by the time in their names)."""
        removed = 0
        root = self._open_root()
        try:
            fd = os.open(TRASH, _DIR_FLAGS, dir_fd=root)
        except OSError:
            return 0
        finally:
            os.close(root)
        try:
            for name in os.listdir(fd):
                stamp = name.split("-", 1)[0]
                if stamp.isdecimal() and now - int(stamp) > self.trash_days * 86400:
                    _remove_tree(fd, name)
                    removed += 1
        finally:
            os.close(fd)
        return removed


def open_dir(parent: int, name: str, *, create: bool, mode: int) -> int:
    """Open folder `name` under `parent` with O_NOFOLLOW, making it when asked and missing; a
    link or anything else there is refused (never replaced: it is not agentd's)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise WorkspaceError(f"the folder {name!r} is missing; restart agentd") from None
    except OSError as exc:
        raise WorkspaceError(
            f"{name!r} in the workspace is a link or not a folder; agentd does not follow it. "
            "Remove it on the server; agentd makes the folder again"
        ) from exc
    made = True
    try:
        os.mkdir(name, mode=mode, dir_fd=parent)
    except FileExistsError:  # made meanwhile: opened (and checked) below
        made = False
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise WorkspaceError(f"{name!r} in the workspace is a link or not a folder") from exc
    if made:
        os.fchmod(fd, mode)  # mkdir's mode passed through the umask
    return fd


def _remove_tree(parent: int, name: str) -> None:
    """rmtree through descriptors, never following a symlink."""
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        for child in os.listdir(fd):
            _remove_tree(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _read_all(fd: int, limit: int) -> bytes:
    chunks = []
    total = 0
    while total < limit and (chunk := os.read(fd, min(1 << 20, limit - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _refuse(st: os.stat_result, shown: str) -> str | None:
    if stat.S_ISDIR(st.st_mode):
        return f"{shown!r} is a folder; use list_files"
    if not stat.S_ISREG(st.st_mode):
        return f"{shown!r} is not a regular file (a device, FIFO or socket); refused"
    if st.st_nlink > 1:
        return f"{shown!r} has other hard links (it may be a file outside the workspace); refused"
    return None


def _why_not_folder(shown: str, exc: OSError) -> str:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return f"{shown!r} is a symlink or not a folder; links are not followed"
    return f"{shown!r} cannot be opened as a folder"


def _why_not_file(shown: str, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:  # the last part is a symlink
        return f"{shown!r} is a symlink; links are not followed"
    return f"{shown!r} cannot be opened"


def as_text(data: bytes) -> str | None:
    """The text, or None when the bytes are binary (a NUL byte, or not UTF-8)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def sniff(name: str, data: bytes) -> str:
    for magic, mime in _MAGIC.items():
        if data.startswith(magic):
            return mime
    guessed = mimetypes.guess_type(name)[0]
    if guessed:
        return guessed
    return "text/plain" if as_text(data) is not None else "application/octet-stream"
