"""One person, one agentd user, on every channel: a channel's account is linked to a user by
a pairing code made for that user (`agentd pair --link USER`), and its messages carry the
user's id from then on. An account linked to nobody is its own user (so a Telegram user id is
an agentd user id, as it always was)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentd.ledger import audit


class Account(BaseModel):
    account_id: int
    user_id: int
    channel: str
    linked_at: float


def user_of(conn: Any, account_id: int) -> int:
    """The agentd user an account speaks for: the one it is linked to, else itself."""
    row = conn.execute(
        "SELECT user_id FROM user_accounts WHERE account_id = ?", (account_id,)
    ).fetchone()
    return int(row[0]) if row is not None else account_id


def link(conn: Any, account_id: int, user_id: int, channel: str, now: float) -> None:
    """Make `account_id` (on `channel`) speak for `user_id`; audited."""
    conn.execute(
        "INSERT INTO user_accounts (account_id, user_id, channel, linked_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (account_id) DO UPDATE SET user_id = excluded.user_id, "
        "channel = excluded.channel, linked_at = excluded.linked_at",
        (account_id, user_id, channel, now),
    )
    detail = {"account": account_id, "channel": channel}
    audit.record(conn, "account_linked", user_id=user_id, detail=detail, at=now)


def unlink(conn: Any, account_id: int, user_id: int, channel: str, now: float) -> bool:
    """`account_id` speaks for `user_id` no more (it is its own user again); audited. False
    when it was not linked to them."""
    gone = conn.execute(
        "DELETE FROM user_accounts WHERE account_id = ? AND user_id = ?", (account_id, user_id)
    ).rowcount
    if gone:
        detail = {"account": account_id, "channel": channel}
        audit.record(conn, "account_unlinked", user_id=user_id, detail=detail, at=now)
    return bool(gone)


def linked_ids(conn: Any) -> frozenset[int]:
    """Every linked account (served when the user it speaks for is)."""
    return frozenset(r[0] for r in conn.execute("SELECT account_id FROM user_accounts"))


def accounts_of(conn: Any) -> list[Account]:
    rows = conn.execute(
        "SELECT account_id, user_id, channel, linked_at FROM user_accounts ORDER BY linked_at"
    ).fetchall()
    return [Account(account_id=r[0], user_id=r[1], channel=r[2], linked_at=r[3]) for r in rows]


def served_accounts(conn: Any, served: frozenset[int]) -> frozenset[int]:
    """`served` users and every account linked to one of them."""
    rows = conn.execute("SELECT account_id, user_id FROM user_accounts").fetchall()
    return served | {account for account, user in rows if user in served}
