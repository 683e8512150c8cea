"""One skill folder on disk: its files, its scripts, its content hash, read under limits.

Everything here is blocking file work: the daemon calls it through `asyncio.to_thread`.
A folder holding a symbolic link (or anything but plain files and folders) is refused: a link
could lead a "skill file" anywhere on the machine, and the hash would not cover its target.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from agentd.skills.format import Manifest, SkillFormatError, parse_skill_md

SKILL_FILE = "SKILL.md"
SKILL_MD_MAX = 1_000_000  # bytes; the spec recommends under 500 lines
SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".js", ".mjs", ".ts", ".rb", ".pl")


class SkillFolderError(ValueError):
    """The folder cannot be a skill (missing SKILL.md, a link, over a limit); says why."""


@dataclass(frozen=True)
class Limits:
    max_files: int = 500
    max_bytes: int = 50_000_000


@dataclass(frozen=True)
class SkillFile:
    path: str  # relative, with '/'
    size: int
    executable: bool
    script: bool


@dataclass(frozen=True)
class SkillFolder:
    """A valid skill: where it is, what it says, what it holds and the hash of all of it."""

    path: Path
    manifest: Manifest
    files: tuple[SkillFile, ...]
    content_hash: str
    warnings: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def scripts(self) -> list[str]:
        return [f.path for f in self.files if f.script]


def _is_script(rel: str, mode: int, head: bytes) -> bool:
    return (
        rel.startswith("scripts/")
        or bool(mode & 0o111)
        or head.startswith(b"#!")
        or rel.endswith(SCRIPT_SUFFIXES)
    )


def _walk(root: Path, limits: Limits) -> list[tuple[str, Path, os.stat_result]]:
    """Every plain file under root (sorted), refusing links, devices and anything over limits."""
    found: list[tuple[str, Path, os.stat_result]] = []
    total = 0
    folders = 0
    pending = [root]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                path = Path(entry.path)
                rel = path.relative_to(root).as_posix()
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    raise SkillFolderError(f"{rel} is a symbolic link; a skill holds plain files")
                if stat.S_ISDIR(info.st_mode):
                    folders += 1
                    if folders > limits.max_files:
                        raise SkillFolderError(f"more than {limits.max_files} folders")
                    pending.append(path)
                    continue
                if not stat.S_ISREG(info.st_mode):
                    raise SkillFolderError(f"{rel} is not a plain file")
                total += info.st_size
                found.append((rel, path, info))
                if len(found) > limits.max_files:
                    raise SkillFolderError(f"more than {limits.max_files} files")
                if total > limits.max_bytes:
                    raise SkillFolderError(f"more than {limits.max_bytes:,} bytes of files")
    return sorted(found, key=lambda item: item[0])


def _hash_files(entries: list[tuple[str, Path, os.stat_result]]) -> tuple[str, list[SkillFile]]:
    """sha256 over every file's path, executable bit and content, in path order."""
    digest = hashlib.sha256(b"agentd-skill-v1\n")
    files = []
    for rel, path, info in entries:
        inner = hashlib.sha256()
        head = b""
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 16):
                head = head or chunk[:2]
                inner.update(chunk)
        executable = bool(info.st_mode & 0o111)
        digest.update(f"{rel}\0{int(executable)}\0{inner.hexdigest()}\n".encode())
        files.append(SkillFile(rel, info.st_size, executable, _is_script(rel, info.st_mode, head)))
    return digest.hexdigest(), files


def read_skill(path: Path, limits: Limits = Limits()) -> SkillFolder:
    """Read and check one skill folder; SkillFolderError / SkillFormatError say what is wrong."""
    if path.is_symlink() or not path.is_dir():
        raise SkillFolderError(f"{path} is not a folder")
    skill_md = path / SKILL_FILE
    if not skill_md.is_file():
        raise SkillFolderError(f"no {SKILL_FILE} in {path}")
    entries = _walk(path, limits)
    md_size = next(info.st_size for rel, _, info in entries if rel == SKILL_FILE)
    if md_size > SKILL_MD_MAX:
        raise SkillFolderError(f"{SKILL_FILE} is {md_size:,} bytes; at most {SKILL_MD_MAX:,}")
    try:
        text = skill_md.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SkillFormatError(f"{SKILL_FILE} is not UTF-8 text") from None
    manifest = parse_skill_md(text)
    content_hash, files = _hash_files(entries)
    warnings = []
    if path.name != manifest.name:
        warnings.append(f"the folder is named {path.name!r} but the skill {manifest.name!r}")
    if manifest.extra:
        warnings.append("fields outside the specification kept: " + ", ".join(manifest.extra))
    return SkillFolder(path, manifest, tuple(files), content_hash, tuple(warnings))


def hash_folder(path: Path, limits: Limits = Limits()) -> str:
    """The content hash alone (the check before each use), same rules as read_skill."""
    return _hash_files(_walk(path, limits))[0]
