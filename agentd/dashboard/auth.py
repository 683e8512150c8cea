"""Login links and sessions, stored hashed: a leaked database copy opens nothing.

A login link carries a random token; only its SHA-256 is stored, with an expiry, and it is
used once. Redeeming it creates a session whose id (also stored hashed) is the cookie. The
CSRF token of a session is an HMAC of the session id, so it needs no column and no state.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Any

from agentd.ledger import audit

# The tables are the migration m028_dashboard (agentd.db.migrations), applied with the rest.
COOKIE = "agentd_session"


def cookie_name(secure: bool) -> str:
    """Over https the "__Host-" prefix makes the browser refuse the cookie unless it is
    Secure, for this host only (no Domain) and for every path: no sibling subdomain can set
    or shadow it."""
    return f"__Host-{COOKIE}" if secure else COOKIE


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_login(conn: Any, *, minutes: float, made_by: str, now: float | None = None) -> str:
    """A one-time login token (the caller commits); only its hash is kept."""
    now = time.time() if now is None else now
    token = secrets.token_urlsafe(32)
    conn.execute("DELETE FROM dashboard_logins WHERE expires_at < ?", (now - 86400,))
    conn.execute(
        "INSERT INTO dashboard_logins (token_hash, created_at, expires_at, made_by) "
        "VALUES (?, ?, ?, ?)",
        (_digest(token), now, now + minutes * 60, made_by),
    )
    audit.record(conn, "dashboard_link", detail={"by": made_by}, at=now)
    return token


def redeem(conn: Any, token: str, hours: float, now: float | None = None) -> str | None:
    """A new session id for an unused, unexpired token (marked used), else None."""
    now = time.time() if now is None else now
    used = conn.execute(
        "UPDATE dashboard_logins SET used_at = ? "
        "WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?",
        (now, _digest(token), now),
    ).rowcount
    if used != 1:
        return None
    session = secrets.token_urlsafe(32)
    conn.execute("DELETE FROM dashboard_sessions WHERE expires_at < ?", (now,))
    conn.execute(
        "INSERT INTO dashboard_sessions (session_hash, created_at, expires_at, csrf_key) "
        "VALUES (?, ?, ?, ?)",
        (_digest(session), now, now + hours * 3600, secrets.token_hex(32)),
    )
    audit.record(conn, "dashboard_login", at=now)
    return session


def session_key(conn: Any, session: str | None, now: float | None = None) -> str | None:
    """The session's CSRF key when the cookie names a live session, else None."""
    if not session:
        return None
    now = time.time() if now is None else now
    row = conn.execute(
        "SELECT csrf_key FROM dashboard_sessions WHERE session_hash = ? AND expires_at > ?",
        (_digest(session), now),
    ).fetchone()
    return row[0] if row else None


def end_session(conn: Any, session: str) -> None:
    conn.execute("DELETE FROM dashboard_sessions WHERE session_hash = ?", (_digest(session),))


def csrf_token(key: str) -> str:
    return hmac.new(bytes.fromhex(key), b"csrf", hashlib.sha256).hexdigest()


def csrf_ok(key: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(csrf_token(key), given or "")


def flash_sig(key: str, text: str) -> str:
    """The session's seal on a message the server itself put in a redirect: a link someone
    else wrote (`?done=Your session expired, log in at evil.example`) carries none."""
    return hmac.new(bytes.fromhex(key), b"flash\0" + text.encode(), hashlib.sha256).hexdigest()


def flash_ok(key: str, text: str, given: str | None) -> bool:
    return bool(key and text and given) and hmac.compare_digest(flash_sig(key, text), given or "")
