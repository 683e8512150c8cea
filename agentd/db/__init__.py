"""SQLite access: connection setup, migrations and the daemon's single write path."""

from agentd.db.connect import DatabaseError, open_sync
from agentd.db.database import Conn, Database

__all__ = ["Conn", "Database", "DatabaseError", "open_sync"]
