"""The page's transcript in retention (`chat.channel.Channel.kept`): `webchat_messages` older
than `[retention] message_days` go, and with them the files no remaining message names."""

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


def prune_messages(conn: Any, before: float, batch: int) -> tuple[int, list[str]]:
    """Delete up to `batch` messages written before `before`; (how many, the hashes of files
    no message names any more)."""
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
