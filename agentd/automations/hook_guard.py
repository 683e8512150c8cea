"""What makes a signed webhook body count once: replay memory, signed timestamps, start rates.

A signature proves who wrote a body, not that this is the first time it arrives: a captured
delivery verifies for ever. So each accepted body's digest is remembered for the sender's
retry window (across every hook, so a body signed for one hook is not taken by another that
shares its secret), in the database with its age, so a restart forgets none; its instance id
is derived from that digest, so two copies racing in at once still start one instance. Where
the sender signs a timestamp, an old one is refused. Starts per hook are rate-limited, in the
database too: a leaked secret cannot flood the owner, not even across restarts.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

MAX_REMEMBERED = 20_000


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def replay_key(body_digest: str, now: float, window: float) -> str:
    """The part of an instance id that a retry within the window shares (the digest and the
    window it fell in)."""
    return f"{body_digest[:40]}:{int(now // max(window, 1.0))}"


@dataclass
class Seen:
    """Digests of accepted bodies with the time each was taken, in the database (a restart
    forgets none), each forgotten `window` seconds after it was taken: the age decides, not
    which calendar window a delivery fell in."""

    window: float
    db: Any  # the daemon's Database: reads off the loop, writes through the one writer

    async def earlier(self, body_digest: str, now: float) -> tuple[str, str] | None:
        """(hook, instance id) that took this body within the window, or None."""
        return await self.db.read(_earlier, body_digest, now - self.window)  # type: ignore[no-any-return]

    async def remember(self, body_digest: str, hook: str, instance_id: str, now: float) -> None:
        await self.db.write(_remember, body_digest, hook, instance_id, now, now - self.window)


def _earlier(conn: Any, body_digest: str, since: float) -> tuple[str, str] | None:
    row = conn.execute(
        "SELECT hook, instance_id FROM hook_deliveries WHERE digest = ? AND accepted_at >= ?",
        (body_digest, since),
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def _remember(
    conn: Any, body_digest: str, hook: str, instance_id: str, now: float, before: float
) -> None:
    conn.execute("DELETE FROM hook_deliveries WHERE accepted_at < ?", (before,))
    conn.execute(
        "INSERT OR REPLACE INTO hook_deliveries (digest, hook, instance_id, accepted_at) "
        "VALUES (?, ?, ?, ?)",
        (body_digest, hook, instance_id, now),
    )
    conn.execute(
        "DELETE FROM hook_deliveries WHERE digest IN (SELECT digest FROM hook_deliveries "
        "ORDER BY accepted_at DESC LIMIT -1 OFFSET ?)",
        (MAX_REMEMBERED,),
    )


@dataclass
class StartRate:
    """A token bucket per hook: `per_minute` starts, refilled continuously, kept in the
    database. In memory, each restart (an OOM kill, a crash, an upgrade) would hand a leaked
    secret a fresh minute of starts; a refusal only reads, so a flood of 429s costs no write."""

    per_minute: int
    db: Any  # the daemon's Database

    async def allow(self, hook: str, now: float) -> bool:
        if await self.db.read(_tokens, hook, self.per_minute, now) < 1.0:
            return False
        return await self.db.write(_take, hook, self.per_minute, now)  # type: ignore[no-any-return]

    async def give_back(self, hook: str) -> None:
        """A start refused for its data (422) started nothing: its token returns, so a sender
        fixing a typo is not locked out by the attempts the door turned away."""
        await self.db.write(_give_back, hook, self.per_minute)


def _tokens(conn: Any, hook: str, per_minute: int, now: float) -> float:
    row = conn.execute("SELECT tokens, at FROM hook_rates WHERE hook = ?", (hook,)).fetchone()
    if row is None:
        return float(per_minute)
    elapsed = max(0.0, now - float(row[1]))  # a clock set back refills nothing
    return min(float(per_minute), float(row[0]) + elapsed * per_minute / 60.0)


def _take(conn: Any, hook: str, per_minute: int, now: float) -> bool:
    """One start from the bucket, read again in the write: two racing starts take two."""
    tokens = _tokens(conn, hook, per_minute, now)
    if tokens < 1.0:
        return False
    conn.execute(
        "INSERT INTO hook_rates (hook, tokens, at) VALUES (?, ?, ?) ON CONFLICT (hook) "
        "DO UPDATE SET tokens = excluded.tokens, at = excluded.at",
        (hook, tokens - 1.0, now),
    )
    return True


def _give_back(conn: Any, hook: str, per_minute: int) -> None:
    conn.execute(
        "UPDATE hook_rates SET tokens = MIN(?, tokens + 1.0) WHERE hook = ?", (per_minute, hook)
    )


def stale_timestamp(value: str, now: float, max_age: float) -> str | None:
    """Why a signed timestamp (seconds since the epoch) is refused, or None."""
    try:
        when = float(value.strip())
    except ValueError:
        return "the signed timestamp is not a number of seconds"
    if not math.isfinite(when):  # "nan" compares false with everything: it would never age
        return "the signed timestamp is not a number of seconds"
    if abs(now - when) > max_age:
        return f"the signed timestamp is more than {max_age:g} s away from now"
    return None
