"""Memories in and out as files: OpenClaw's and Hermes' memory files, plain Markdown and JSON.

Formats, as their projects document them:
- OpenClaw workspace (`~/.openclaw/workspace`): `MEMORY.md` (curated long-term memory, free
  Markdown), `USER.md` (the user's profile and preferences), `SOUL.md` (the assistant's persona
  and how it should answer), and daily notes `memory/YYYY-MM-DD.md` (or
  `memory/YYYY-MM-DD-<slug>.md`), append-only logs of that day.
- Hermes Agent (`~/.hermes`): `memories/MEMORY.md` and `memories/USER.md`, entries separated by
  a line holding only `§` (an entry may span lines), and `SOUL.md` beside `memories/`.
- Markdown: one memory per list item or paragraph; headings become the items' context.
- JSON: a list of objects with `content` and optionally `kind`, `key`, `date`/`created_at`,
  `pinned` (what `export --format json` writes).

Whose words an imported memory is comes from the file only where the file says so: agentd's
JSON export writes each memory's `origin`, the peer formats say nothing. A file is not the
owner's word for itself (anyone can write one), so the importer (importer.py) stores it all as
outside content unless the owner says, for that import, that the file is theirs; even then an
`origin: outside` stays outside. Memories are dated by their daily note's date or their own
`date` where there is one. An import is idempotent: each item
gets a source key from its user, kind and normalised text, so re-importing (or importing an
export) adds nothing, and a text the owner has already merges with it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentd.memory.facts import norm_text
from agentd.memory.store import Memory, MemoryKind, Origin

Format = Literal["openclaw", "hermes", "markdown", "json"]
HERMES_SEPARATOR = "§"
_DAILY = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:-[\w.-]+)?\.md$")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?")
_HEADING = re.compile(r"^\s*#{1,6}\s+(.*?)\s*#*\s*$")
# What each peer file holds, as agentd's kinds.
FILE_KINDS: dict[str, MemoryKind] = {
    "MEMORY.md": "note",
    "USER.md": "fact",
    "SOUL.md": "preference",
}


class ImportItem(BaseModel):
    """One memory read from a file, before it is stored."""

    content: str = Field(min_length=1)
    kind: MemoryKind = "note"
    key: str | None = None
    created_at: float | None = None
    pinned: bool = False
    context: str | None = None  # the heading it was under, or the daily note's date
    origin_ref: str  # the file (and heading) it came from
    origin: Origin | None = None  # whose words the file says it is (None: it does not say)

    def source_key(self, user_id: int) -> str:
        digest = hashlib.sha1(f"{user_id}\0{self.kind}\0{norm_text(self.content)}".encode())
        return f"import:{digest.hexdigest()[:24]}"


def _day(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()


def markdown_items(
    text: str, ref: str, kind: MemoryKind, day: str | None = None
) -> list[ImportItem]:
    """List items and paragraphs of a Markdown text, each under its nearest heading."""
    items: list[ImportItem] = []
    heading: str | None = None
    block: list[str] = []

    def flush() -> None:
        joined = " ".join(" ".join(block).split())
        block.clear()
        if joined:
            context = " · ".join(x for x in (day, heading) if x) or None
            items.append(
                ImportItem(
                    content=joined,
                    kind=kind,
                    created_at=_day(day) if day else None,
                    context=context,
                    origin_ref=f"{ref}#{heading}" if heading else ref,
                )
            )

    for line in text.splitlines():
        if (m := _HEADING.match(line)) is not None:
            flush()
            heading = m.group(1) or None
        elif not line.strip() or line.strip() == HERMES_SEPARATOR:
            flush()
        elif _BULLET.match(line):
            flush()
            block.append(_BULLET.sub("", line, count=1))
        else:
            block.append(line.strip())
    flush()
    return items


def hermes_items(text: str, ref: str, kind: MemoryKind) -> list[ImportItem]:
    """Entries of a Hermes memory file: blocks between `§` lines (each may span lines)."""
    entries = re.split(rf"(?m)^\s*{HERMES_SEPARATOR}\s*$", text)
    return [
        ImportItem(content=" ".join(e.split()), kind=kind, origin_ref=ref)
        for e in entries
        if e.strip()
    ]


def json_items(text: str, ref: str) -> list[ImportItem]:
    """Objects of a JSON list (or {"memories": [...]}) with at least a content."""
    raw = json.loads(text)
    rows = raw.get("memories", []) if isinstance(raw, dict) else raw
    items = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not str(row.get("content") or "").strip():
            continue
        when = row.get("date") or row.get("created_at")
        items.append(
            ImportItem(
                content=" ".join(str(row["content"]).split()),
                kind=row.get("kind") if row.get("kind") in _KINDS else "note",
                key=row.get("key") or row.get("slot") or None,
                created_at=_when(when),
                pinned=bool(row.get("pinned", False)),
                origin_ref=ref,
                origin=row.get("origin") if row.get("origin") in _ORIGINS else None,
            )
        )
    return items


_KINDS = ("summary", "fact", "preference", "task", "note", "turn")
_ORIGINS = ("user", "model", "outside")


# The dates a memory may carry: any day every time zone can show. A file's date outside them
# (1e20, NaN, the last hours of year 9999 east of UTC) would make every listing, export and
# recall that shows the memory fail, so such a memory is dated on the day it is imported.
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC).timestamp()
_LATEST = datetime(9999, 12, 30, tzinfo=UTC).timestamp()


def _when(value: Any) -> float | None:
    stamp = _timestamp(value)
    if stamp is None or not _EARLIEST <= stamp <= _LATEST:  # NaN fails the comparison too
        return None
    return stamp


def _timestamp(value: Any) -> float | None:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value:
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    return None


# A memory file is notes a person or an agent wrote: far below this. A larger one is refused
# before it is read whole (a log or a disk image named by mistake).
MAX_IMPORT_BYTES = 64 * 1024 * 1024


def _read(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_IMPORT_BYTES:
        raise ValueError(
            f"{path.name} is {size / 2**20:.1f} MB; a memory file may be up to "
            f"{MAX_IMPORT_BYTES / 2**20:.1f} MB (is it the file you meant?)"
        )
    return path.read_text(encoding="utf-8")


def read_peer(root: Path, fmt: Format) -> list[ImportItem]:
    """Every memory of a peer's directory (OpenClaw workspace, Hermes home) or one file."""
    if root.is_file():
        return read_file(root, fmt)
    items: list[ImportItem] = []
    places = [root, root / "memories"] if fmt == "hermes" else [root]
    for place in places:
        for name, kind in FILE_KINDS.items():
            path = place / name
            if path.is_file():
                items += _parse(path, fmt, kind, path.relative_to(root).as_posix())
    daily = root / "memory"
    if daily.is_dir():
        for path in sorted(daily.iterdir()):
            if (m := _DAILY.match(path.name)) is not None and path.is_file():
                ref = path.relative_to(root).as_posix()
                text = _read(path)
                items += markdown_items(text, ref, "note", day=m.group(1))
    return items


def _parse(path: Path, fmt: Format, kind: MemoryKind, ref: str) -> list[ImportItem]:
    text = _read(path)
    if fmt == "hermes" and path.name != "SOUL.md":
        return hermes_items(text, ref, kind)
    return markdown_items(text, ref, kind)


def read_file(path: Path, fmt: Format) -> list[ImportItem]:
    """One file: JSON, a daily note (dated by its name), a peer file or plain Markdown."""
    text = _read(path)
    if fmt == "json" or path.suffix == ".json":
        return json_items(text, path.name)
    if (m := _DAILY.match(path.name)) is not None:
        return markdown_items(text, path.name, "note", day=m.group(1))
    kind = FILE_KINDS.get(path.name, "note")
    if fmt == "hermes" and path.name != "SOUL.md":
        return hermes_items(text, path.name, kind)
    return markdown_items(text, path.name, kind)


# --------------------------------------------------------------------------------------------
# Export


def _file_of(memory: Memory) -> str:
    """Which peer file a memory belongs in."""
    ref = (memory.origin_ref or "").split("#")[0]
    name = ref.rsplit("/", 1)[-1]
    if name in FILE_KINDS:
        return name
    if memory.kind == "note" and _DAILY.match(name):
        return f"memory/{name}"
    return "USER.md" if memory.kind in ("fact", "preference", "task") else "MEMORY.md"


def export_files(memories: Iterable[Memory], fmt: Format) -> dict[str, str]:
    """Relative path → text of the export in `fmt` (summaries and turns are left out of the
    peer formats, which have no place for them; JSON keeps everything)."""
    memories = sorted(memories, key=lambda m: (m.created_at, m.id))
    if fmt == "json":
        return {"memories.json": json.dumps([_json_row(m) for m in memories], indent=1) + "\n"}
    files: dict[str, list[str]] = {}
    for memory in memories:
        if memory.kind in ("summary", "turn") and fmt != "markdown":
            continue
        name = "memories.md" if fmt == "markdown" else _file_of(memory)
        if fmt == "hermes" and not name.startswith("memory/") and name != "SOUL.md":
            name = f"memories/{name}"
        elif fmt == "hermes":
            name = "memories/MEMORY.md" if name.startswith("memory/") else name
        files.setdefault(name, []).append(" ".join(memory.content.split()))
    sep = f"\n{HERMES_SEPARATOR}\n" if fmt == "hermes" else "\n"
    out = {}
    for name, lines in files.items():
        if fmt == "hermes" and name != "SOUL.md":
            out[name] = sep.join(lines) + "\n"
        else:
            out[name] = "\n".join(f"- {line}" for line in lines) + "\n"
    return out


def _json_row(memory: Memory) -> dict[str, Any]:
    return {
        "id": memory.id,
        "kind": memory.kind,
        "key": memory.slot,
        "content": memory.content,
        "date": datetime.fromtimestamp(memory.created_at, UTC).isoformat(),
        "updated": datetime.fromtimestamp(memory.updated_at, UTC).isoformat(),
        "origin": memory.origin,
        "origin_ref": memory.origin_ref,
        "pinned": memory.pinned,
    }


def write_export(files: dict[str, str], out: Path) -> list[Path]:
    """Write the export under `out` (a directory), refusing to overwrite a file."""
    written = []
    for name, text in files.items():
        path = out / name
        if path.exists():
            raise FileExistsError(f"{path} exists: export into an empty directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
