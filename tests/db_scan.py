"""Where a value shows up in a daemon's database: every text cell that holds it."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def rows_holding(db_path: Path, needle: str) -> list[tuple[str, str]]:
    """(table.column, value excerpt) of every text cell in the database that holds `needle`."""
    found: list[tuple[str, str]] = []
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r[0].startswith("sqlite_")
        ]
        for table in tables:
            try:
                cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            except sqlite3.DatabaseError:
                continue
            for col in cols:
                try:
                    hits = conn.execute(
                        f'SELECT CAST("{col}" AS TEXT) FROM "{table}" '
                        f'WHERE instr(CAST("{col}" AS TEXT), ?) > 0',
                        (needle,),
                    ).fetchall()
                except sqlite3.DatabaseError:
                    continue
                for (value,) in hits:
                    at = value.find(needle)
                    found.append((f"{table}.{col}", value[max(0, at - 120) : at + 80]))
    finally:
        conn.close()
    return found
