"""Where a value shows up in a daemon's database: every text cell that holds it."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def rows_holding(db_path: Path, needle: str, *, any_case: bool = False) -> list[tuple[str, str]]:
    """(table.column, value excerpt) of every text cell in the database that holds `needle`
    (in any case with `any_case`)."""
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
                continue  # a virtual table whose module this connection lacks
            for col in cols:
                try:
                    cell = f'CAST("{col}" AS TEXT)'
                    where = f"instr(upper({cell}), upper(?))" if any_case else f"instr({cell}, ?)"
                    hits = conn.execute(
                        f'SELECT {cell} FROM "{table}" WHERE {where} > 0', (needle,)
                    ).fetchall()
                except sqlite3.DatabaseError:
                    continue  # a virtual table whose module this connection lacks
                for (value,) in hits:
                    at = value.upper().find(needle.upper()) if any_case else value.find(needle)
                    found.append((f"{table}.{col}", value[max(0, at - 120) : at + 80]))
    finally:
        conn.close()
    return found
