"""Open SQLite with sqlite-vec loaded, whether or not this Python can load extensions."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
from pathlib import Path
from typing import Any

BUSY_TIMEOUT_MS = 5000


class DatabaseError(Exception):
    """SQLite could not be opened or prepared; the message says how to fix it."""


def _sqlite_module() -> Any:
    """The stdlib sqlite3 when it can load extensions, else sqlean.py (same API, bundled SQLite)."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        import sqlean
    except ImportError as exc:  # pragma: no cover - sqlean.py is a core dependency
        raise DatabaseError(
            "this Python's sqlite3 cannot load extensions and sqlean.py is not installed; "
            "run: pip install sqlean.py"
        ) from exc
    return sqlean


def _touch_private(path: Path) -> None:
    # Create the file 0600 before SQLite does, so no window exists where others can read it.
    if str(path) == ":memory:" or path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)


def _vec0_path() -> str:
    """The sqlite-vec library, found without importing the package (which imports numpy when
    it is installed: ~80 ms on every CLI command)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise DatabaseError("sqlite-vec is not installed; run: pip install sqlite-vec")
    return str(Path(next(iter(spec.submodule_search_locations))) / "vec0")


def open_sync(path: str | Path, *, readonly: bool = False, synchronous: str = "FULL") -> Any:
    """A configured sqlite3-compatible connection with sqlite-vec loaded (autocommit mode)."""
    module = _sqlite_module()
    path = Path(path)
    if readonly:
        if not path.exists():
            raise DatabaseError(f"database {path} does not exist; start `agentd run` first")
        conn = module.connect(
            f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
    else:
        old_umask = os.umask(0o077)
        try:
            _touch_private(path)
            conn = module.connect(str(path), isolation_level=None, check_same_thread=False)
        finally:
            os.umask(old_umask)
    try:
        conn.enable_load_extension(True)
        conn.load_extension(_vec0_path())
        conn.enable_load_extension(False)
    except Exception as exc:
        conn.close()
        raise DatabaseError(f"could not load sqlite-vec into SQLite: {exc}") from exc
    conn.row_factory = module.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL by default: a commit survives power loss too, since Telegram is acknowledged
        # right after it. The caller validated the level (Database.open, StorageConfig).
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn
