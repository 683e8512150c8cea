"""The page's transcript in retention (`chat.channel.Channel.kept`): `webchat_messages` older
than `[retention] message_days` go, and with them the files no remaining message names.

An open page asks for the changes after the newest `seq` it saw, and names messages by `id`:
retention may remove every message, the newest included, so the highest of each it removed is
kept (`FLOOR_KEY`) and never given again (store.py counts on from it)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from agentd.chat.kept import KeptTable


def kept_transcript(files_dir: Path) -> KeptTable:
    def count(conn: Any, cut: float) -> int:
        row = conn.execute("SELECT COUNT(*) FROM webchat_messages WHERE created_at < ?", (cut,))
        return int(row.fetchone()[0])

    def prune(conn: Any, cut: float, batch: int) -> int:
        removed, files = prune_messages(conn, cut, batch)
        for digest in files:
            drop_file(files_dir / digest, cut)
        return removed

    return KeptTable(part="webchat_messages", keep="message_days", count=count, prune=prune)


FLOOR_KEY = "webchat_floor"


def floor(conn: Any) -> tuple[int, int]:
    """(seq, id): the highest of each retention removed, or (0, 0)."""
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (FLOOR_KEY,)).fetchone()
    if row is None:
        return 0, 0
    seq, _, ident = str(row[0]).partition(":")
    return int(seq), int(ident)


def next_numbers(conn: Any) -> tuple[int, int]:
    """(seq, id) for the next change and message: past every one given, removed or not."""
    seq, ident = conn.execute(
        "SELECT COALESCE(MAX(seq), 0), COALESCE(MAX(id), 0) FROM webchat_messages"
    ).fetchone()
    low_seq, low_id = floor(conn)
    return max(int(seq), low_seq) + 1, max(int(ident), low_id) + 1


def _raise_floor(conn: Any) -> None:
    seq, ident = next_numbers(conn)
    conn.execute(
        "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
        "SET value = excluded.value",
        (FLOOR_KEY, f"{seq - 1}:{ident - 1}"),
    )


def prune_messages(conn: Any, before: float, batch: int) -> tuple[int, list[str]]:
    """Delete up to `batch` messages written before `before`; (how many, the hashes of files
    no message names any more)."""
    _raise_floor(conn)
    rows = conn.execute(
        "SELECT id, file_sha256 FROM webchat_messages WHERE created_at < ? ORDER BY id LIMIT ?",
        (before, batch),
    ).fetchall()
    conn.executemany("DELETE FROM webchat_messages WHERE id = ?", [(r[0],) for r in rows])
    files = {r[1] for r in rows if r[1] is not None}
    named = {
        r[0]
        for d in files
        for r in conn.execute(
            "SELECT file_sha256 FROM webchat_messages WHERE file_sha256 = ? LIMIT 1", (d,)
        )
    }
    return len(rows), sorted(files - named)


def drop_file(path: Path, cut: float) -> None:
    """Remove a file no message names, unless it was kept again since the cutoff: the same
    file sent anew is written before its message is (webchat/outbox.py touches it)."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_mtime < cut:
            path.unlink()
