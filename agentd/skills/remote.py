"""`agentd skills add URL`: fetch a zip or tar archive, or a single SKILL.md, and unpack it safely.

The download goes through the SSRF-safe fetcher under `[tools.fetch]`'s address policy, capped
at `[skills] max_download_bytes`. Unpacking writes only plain files and folders under a fresh
folder: no absolute paths, no `..`, no links or devices, every name created once (O_EXCL,
O_NOFOLLOW), and the bytes actually decompressed are counted against `[skills] max_bytes` and
`max_files` (a header's claimed size is never trusted).
"""

from __future__ import annotations

import asyncio
import io
import os
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from agentd.config import Config
from agentd.net.safe_fetch import FetchPolicy, fetch_raw
from agentd.skills.folder import SKILL_FILE, Limits
from agentd.skills.format import SkillFormatError, parse_skill_md

_CHUNK = 1 << 16


class RemoteSkillError(Exception):
    """The download is not a usable skill, or unpacking it was refused; says why."""


def policy_of(config: Config) -> FetchPolicy:
    fetch = config.tools.fetch
    return FetchPolicy(
        allow_private=fetch.allow_private,
        allowed_hosts=tuple(fetch.allowed_hosts),
        max_bytes=config.skills.max_download_bytes,
        timeout=fetch.timeout,
        max_redirects=fetch.max_redirects,
        user_agent="agentd-skills/0.1",
    )


async def download_skill(url: str, config: Config, into: Path, pick: str | None = None) -> Path:
    """The skill folder the URL holds, unpacked under `into` (a fresh folder)."""
    raw = await fetch_raw(url, policy_of(config))
    if raw.status != 200:
        raise RemoteSkillError(f"the server answered HTTP {raw.status} {raw.reason}".rstrip())
    if raw.truncated:
        raise RemoteSkillError(
            f"it is larger than [skills] max_download_bytes ({config.skills.max_download_bytes:,})"
        )
    limits = Limits(max_files=config.skills.max_files, max_bytes=config.skills.max_bytes)
    return await asyncio.to_thread(unpack, raw.body, into, limits, pick)


def unpack(body: bytes, into: Path, limits: Limits, pick: str | None = None) -> Path:
    """Write the download under `into` and return the skill folder in it (blocking)."""
    root = into / "unpacked"
    root.mkdir(mode=0o700)
    if body.startswith(b"PK\x03\x04"):
        _unzip(body, root, limits)
    elif _scan_tar(body, limits) and _is_tar(body):
        _untar(body, root, limits)
    else:
        return _single_file(body, root)
    return _find_skill(root, pick)


# A pax or GNU long-name header is read whole by tarfile before anything can be checked: a
# 1 MB download can declare a 1 GB header. Headers are walked first, streaming, and refused
# past these sizes; the whole unpacked stream is capped too.
_MAX_META = 64 * 1024
_META_TYPES = (b"x", b"g", b"L", b"K")


def _decompressed(body: bytes, cap: int) -> Iterator[bytes]:
    """The archive's bytes, decompressed in pieces (gzip, bzip2, xz or none); raises past
    `cap` bytes."""
    import bz2
    import lzma

    if body.startswith(b"\x1f\x8b"):
        pieces = _zlib_pieces(body)
    elif body.startswith(b"BZh"):
        pieces = _buffered_pieces(bz2.BZ2Decompressor(), body)
    elif body.startswith(b"\xfd7zXZ\x00"):
        pieces = _buffered_pieces(lzma.LZMADecompressor(), body)
    else:
        pieces = iter([body])
    total = 0
    for piece in pieces:
        total += len(piece)
        if total > cap:
            raise RemoteSkillError(f"the archive unpacks to more than {cap} bytes; refused")
        yield piece


def _zlib_pieces(body: bytes) -> Iterator[bytes]:
    import zlib

    unpack = zlib.decompressobj(wbits=31)
    for at in range(0, len(body), 65536):
        data = body[at : at + 65536]
        while data:
            yield unpack.decompress(data, 1 << 20)
            data = unpack.unconsumed_tail


def _buffered_pieces(unpack: Any, body: bytes) -> Iterator[bytes]:
    for at in range(0, len(body), 65536):
        yield unpack.decompress(body[at : at + 65536], 1 << 20)
        while not unpack.eof and not unpack.needs_input:
            yield unpack.decompress(b"", 1 << 20)
        if unpack.eof:
            return


def _scan_tar(body: bytes, limits: Limits) -> bool:
    """False when `body` is no tar archive; raises when its headers are hostile (a metadata
    header past _MAX_META, or more unpacked bytes than the limits allow)."""
    cap = limits.max_bytes + (limits.max_files * 4 + 16) * (1024 + _MAX_META)
    buffer = bytearray()
    skip = 0
    first = True
    try:
        for chunk in _decompressed(body, cap):
            buffer += chunk
            while True:
                if skip:
                    dropped = min(skip, len(buffer))
                    del buffer[:dropped]
                    skip -= dropped
                    if skip:
                        break
                if len(buffer) < 512:
                    break
                header = bytes(buffer[:512])
                del buffer[:512]
                if first and header[257:262] != b"ustar":
                    return False
                first = False
                if header == bytes(512):
                    return True  # the end-of-archive block
                size = _header_size(header)
                if header[156:157] in _META_TYPES and size > _MAX_META:
                    raise RemoteSkillError(
                        f"the archive has a {size}-byte metadata header; refused"
                    )
                skip = -(-size // 512) * 512
    except (zlib.error, EOFError, OSError, ValueError) as exc:
        if first:
            return False
        raise RemoteSkillError(f"the tar archive cannot be read: {exc}") from None
    return not first


def _header_size(header: bytes) -> int:
    field = header[124:136]
    if field[0] & 0x80:  # base-256 (GNU) for sizes past 8 GB
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip() or b"0"
    return int(text, 8)


def _is_tar(body: bytes) -> bool:
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
            tar.next()
        return True
    except (tarfile.TarError, EOFError, OSError):
        return False


def _single_file(body: bytes, root: Path) -> Path:
    try:
        text = body.decode("utf-8")
        name = parse_skill_md(text).name
    except UnicodeDecodeError:
        raise RemoteSkillError("it is neither a zip or tar archive nor a SKILL.md") from None
    except SkillFormatError as exc:
        raise RemoteSkillError(f"it is not an archive, and not a usable SKILL.md: {exc}") from None
    folder = root / name
    folder.mkdir()
    (folder / SKILL_FILE).write_bytes(body)
    return folder


def _parts(name: str) -> list[str]:
    """An archive member's path as safe parts, or RemoteSkillError."""
    if not name or "\0" in name or "\\" in name or name.startswith("/") or ":" in name[:3]:
        raise RemoteSkillError(f"the archive holds an unsafe path: {name[:200]!r}")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise RemoteSkillError(f"the archive holds a path that leaves it: {name[:200]!r}")
    if len(parts) > 32 or any(len(p.encode()) > 255 for p in parts):
        raise RemoteSkillError(f"the archive holds a path too deep or long: {name[:200]!r}")
    return parts


class _Writer:
    """Creates files and folders under root, counting files and bytes against the limits."""

    def __init__(self, root: Path, limits: Limits) -> None:
        self.root, self.limits = root, limits
        self.files = 0
        self.bytes = 0

    def folder(self, parts: list[str]) -> Path:
        path = self.root.joinpath(*parts) if parts else self.root
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
        return path

    def file(self, parts: list[str], source: IO[bytes], executable: bool) -> None:
        if not parts:
            return
        self.files += 1
        if self.files > self.limits.max_files:
            raise RemoteSkillError(f"the archive holds more than {self.limits.max_files} files")
        parent = self.folder(parts[:-1])
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(parent / parts[-1], flags, 0o755 if executable else 0o644)
        except FileExistsError:
            raise RemoteSkillError(f"the archive holds {'/'.join(parts)} twice") from None
        with os.fdopen(fd, "wb") as out:
            for chunk in _chunks(source):
                self.bytes += len(chunk)
                if self.bytes > self.limits.max_bytes:
                    raise RemoteSkillError(
                        f"it unpacks to more than {self.limits.max_bytes:,} bytes"
                    )
                out.write(chunk)


def _chunks(source: IO[bytes]) -> Iterator[bytes]:
    while chunk := source.read(_CHUNK):
        yield chunk


def _unzip(body: bytes, root: Path, limits: Limits) -> None:
    writer = _Writer(root, limits)
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            members = archive.infolist()
            if len(members) > limits.max_files * 4:
                raise RemoteSkillError(f"the archive holds more than {limits.max_files} files")
            for info in members:
                parts = _parts(info.filename)
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise RemoteSkillError(f"the archive holds a symbolic link: {info.filename}")
                if info.flag_bits & 0x1:
                    raise RemoteSkillError("the archive is encrypted")
                if info.is_dir():
                    writer.folder(parts)
                    continue
                # Permission bits with no file type (Python's writestr, some zippers) are a
                # plain file too; only a type other than a regular file is refused.
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                    raise RemoteSkillError(f"the archive holds a special file: {info.filename}")
                with archive.open(info) as source:
                    writer.file(parts, source, bool(mode & 0o111))
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        NotImplementedError,
        EOFError,
        OSError,
        zlib.error,  # a member whose compressed bytes are corrupt
    ) as exc:
        raise RemoteSkillError(f"the zip archive cannot be read: {exc}") from None


def _untar(body: bytes, root: Path, limits: Limits) -> None:
    writer = _Writer(root, limits)
    seen = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as archive:
            for member in archive:
                seen += 1
                if seen > limits.max_files * 4:
                    raise RemoteSkillError(f"the archive holds more than {limits.max_files} files")
                parts = _parts(member.name)
                if member.isdir():
                    writer.folder(parts)
                elif member.isfile():
                    source = archive.extractfile(member)
                    assert source is not None
                    writer.file(parts, source, bool(member.mode & 0o111))
                elif member.type in (tarfile.XHDTYPE, tarfile.XGLTYPE):
                    continue
                else:
                    kind = "link" if member.issym() or member.islnk() else "special file"
                    raise RemoteSkillError(f"the archive holds a {kind}: {member.name[:200]}")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise RemoteSkillError(f"the tar archive cannot be read: {exc}") from None


def _find_skill(root: Path, pick: str | None) -> Path:
    """The one folder holding a SKILL.md (the archive's top, or one level or two down)."""
    found = sorted(
        {p.parent for depth in ("", "*/", "*/*/") for p in root.glob(f"{depth}{SKILL_FILE}")}
    )
    if pick is not None:
        chosen = [p for p in found if p.name == pick]
        if not chosen:
            names = ", ".join(p.name for p in found) or "none"
            raise RemoteSkillError(f"the archive has no skill folder {pick!r} (it has: {names})")
        return chosen[0]
    if not found:
        raise RemoteSkillError(f"the archive holds no {SKILL_FILE} (at most two folders down)")
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:20])
        raise RemoteSkillError(
            f"the archive holds several skills ({names}); choose one with --skill NAME"
        )
    return found[0]
