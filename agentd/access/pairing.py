"""Pairing: a one-time code sent as `/start <code>` makes its sender a served user, or, for a
code made for a user (`agentd pair --link USER`), links the sender's account to that user
(access/accounts.py): the same person on another channel.

Codes are short-lived and single-use, stored only as their sha256, and every redemption,
good or bad, is audited without the code itself. The database is the source of truth for
paired users; intake adds them to the configured allowlist for each batch it handles.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from typing import Any, Literal

from pydantic import BaseModel

from agentd.access import accounts
from agentd.ledger import audit

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: read off a screen, typed on a phone
CODE_LENGTH = 8  # 31^8 ≈ 8.5e11 codes, valid for minutes: guessing is hopeless
_START = re.compile(r"^/start(?:@\w+)?\s+([A-Za-z0-9-]{4,32})\s*$")
_DIGEST = re.compile(r"[0-9a-f]{64}")


class PairResult(BaseModel):
    ok: bool
    reason: Literal["paired", "linked", "wrong", "expired", "used", "already"]
    user_id: int | None = None  # the agentd user the sender is now (linked: the code's user)


class PairedUser(BaseModel):
    user_id: int
    chat_id: int | None
    username: str
    paired_at: float


def _hash(code: str) -> str:
    return hashlib.sha256(code.strip().upper().replace("-", "").encode()).hexdigest()


def new_code(
    conn: Any,
    *,
    ttl: float,
    created_by: str,
    now: float | None = None,
    link_user_id: int | None = None,
) -> str:
    """Store and return a fresh one-time code, shown as ABCD-EFGH; with `link_user_id`, the
    code links whoever sends it to that user instead of serving a new one."""
    now = time.time() if now is None else now
    code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
    conn.execute(
        "INSERT INTO pairing_codes (code_hash, created_at, expires_at, created_by, link_user_id) "
        "VALUES (?, ?, ?, ?, ?)",
        (_hash(code), now, now + ttl, created_by, link_user_id),
    )
    detail = {"by": created_by, "ttl_s": ttl, "link_user": link_user_id}
    audit.record(conn, "pairing_code_created", detail=detail, at=now)
    return f"{code[:4]}-{code[4:]}"


def code_in(text: str) -> str | None:
    """The code of a `/start <code>` message, if it is one."""
    match = _START.match(text.strip())
    return match[1] if match else None


def start_digest(args: str) -> str:
    """What the `/start` command keeps of its argument: the code's sha256, as codes are stored,
    or "" when it is no code. The command's input is journaled, and a code an account already
    served sends is never redeemed, so in clear it would stay usable to whoever reads the
    database. A digest given again is kept as it is."""
    if _DIGEST.fullmatch(args):
        return args
    code = code_in(f"/start {args}")
    return _hash(code) if code else ""


def redeem(
    conn: Any,
    code: str,
    *,
    user_id: int,
    chat_id: int | None,
    username: str,
    now: float,
    channel: str = "telegram",
) -> PairResult:
    """Pair the sender (`user_id`: their account on `channel`) if the code is right, unused
    and unexpired, or link their account to the code's user; audit the outcome."""
    row = conn.execute(
        "SELECT expires_at, used_by, link_user_id FROM pairing_codes WHERE code_hash = ?",
        (_hash(code),),
    ).fetchone()
    if row is None:
        result = PairResult(ok=False, reason="wrong")
    elif row[1] is not None:
        result = PairResult(ok=False, reason="already" if row[1] == user_id else "used")
    elif now >= row[0]:
        result = PairResult(ok=False, reason="expired")
    elif row[2] is not None:
        conn.execute(
            "UPDATE pairing_codes SET used_by = ?, used_at = ? WHERE code_hash = ?",
            (user_id, now, _hash(code)),
        )
        accounts.link(conn, user_id, int(row[2]), channel, now)
        result = PairResult(ok=True, reason="linked", user_id=int(row[2]))
    else:
        conn.execute(
            "UPDATE pairing_codes SET used_by = ?, used_at = ? WHERE code_hash = ?",
            (user_id, now, _hash(code)),
        )
        conn.execute(
            "INSERT INTO paired_users (user_id, chat_id, username, paired_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (user_id) DO UPDATE SET chat_id = excluded.chat_id, "
            "username = excluded.username, paired_at = excluded.paired_at",
            (user_id, chat_id, username, now),
        )
        result = PairResult(ok=True, reason="paired", user_id=user_id)
    kind = "user_paired" if result.ok else "pairing_failed"
    audit.record(
        conn, kind, chat_id=chat_id, user_id=user_id, detail={"reason": result.reason}, at=now
    )
    return result


def pending(conn: Any, now: float) -> bool:
    """Whether some code is still unused and unexpired (one could be redeemed now)."""
    row = conn.execute(
        "SELECT 1 FROM pairing_codes WHERE used_by IS NULL AND expires_at > ? LIMIT 1", (now,)
    ).fetchone()
    return row is not None


def paired_ids(conn: Any) -> frozenset[int]:
    return frozenset(r[0] for r in conn.execute("SELECT user_id FROM paired_users"))


def list_paired(conn: Any) -> list[PairedUser]:
    rows = conn.execute(
        "SELECT user_id, chat_id, username, paired_at FROM paired_users ORDER BY paired_at"
    ).fetchall()
    return [PairedUser(user_id=r[0], chat_id=r[1], username=r[2], paired_at=r[3]) for r in rows]


def remove(conn: Any, user_id: int) -> bool:
    removed = conn.execute("DELETE FROM paired_users WHERE user_id = ?", (user_id,)).rowcount > 0
    if removed:
        audit.record(conn, "user_removed", user_id=user_id, detail={"by": "cli"})
    return removed
