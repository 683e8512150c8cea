"""What makes a signed webhook body count once: replay memory, signed timestamps, start rates.

A signature proves who wrote a body, not that this is the first time it arrives: a captured
delivery verifies for ever. So each accepted body's digest is remembered for the sender's
retry window (across every hook, so a body signed for one hook is not taken by another that
shares its secret), and its instance id is derived from that digest (a restart still maps a
retry to the same instance within the window). Where the sender signs a timestamp, an old one
is refused. Starts per hook are rate-limited: a leaked secret cannot flood the owner.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field

MAX_REMEMBERED = 20_000


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def replay_key(body_digest: str, now: float, window: float) -> str:
    """The part of an instance id that a retry within the window shares (the digest and the
    window it fell in)."""
    return f"{body_digest[:40]}:{int(now // max(window, 1.0))}"


@dataclass
class Seen:
    """Digests of accepted bodies, oldest first, forgotten after `window` seconds."""

    window: float
    _at: OrderedDict[str, tuple[float, str, str]] = field(default_factory=OrderedDict)

    def _forget(self, now: float) -> None:
        while self._at:
            key, (when, _, _) = next(iter(self._at.items()))
            if now - when <= self.window and len(self._at) <= MAX_REMEMBERED:
                break
            del self._at[key]

    def earlier(self, body_digest: str, now: float) -> tuple[str, str] | None:
        """(hook, instance id) that took this body within the window, or None."""
        self._forget(now)
        found = self._at.get(body_digest)
        return None if found is None else (found[1], found[2])

    def remember(self, body_digest: str, hook: str, instance_id: str, now: float) -> None:
        self._at[body_digest] = (now, hook, instance_id)
        self._at.move_to_end(body_digest)


@dataclass
class StartRate:
    """A token bucket per hook: `per_minute` starts, refilled continuously."""

    per_minute: int
    _tokens: dict[str, tuple[float, float]] = field(default_factory=dict)

    def allow(self, hook: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        tokens, last = self._tokens.get(hook, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - last) * self.per_minute / 60.0)
        if tokens < 1.0:
            self._tokens[hook] = (tokens, now)
            return False
        self._tokens[hook] = (tokens - 1.0, now)
        return True


def stale_timestamp(value: str, now: float, max_age: float) -> str | None:
    """Why a signed timestamp (seconds since the epoch) is refused, or None."""
    try:
        when = float(value.strip())
    except ValueError:
        return "the signed timestamp is not a number of seconds"
    if abs(now - when) > max_age:
        return f"the signed timestamp is more than {max_age:g} s away from now"
    return None
