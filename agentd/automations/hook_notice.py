"""The owner is told when a webhook delivery's signature does not match: a sender whose secret
is wrong otherwise fails in silence (its requests get 401, the daemon only logs), and someone
other than the sender who knows the webhook's address is worth knowing about.

Once a UTC day per webhook, as the notice instance `hook-bad-signature-<hash>-<day>`, however
many requests and restarts; nothing of the request is quoted (it is a stranger's text). Until a
private chat with the owner is known nothing can be said, and the day's notice is kept.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentd.automations.owner import owner
from agentd.chat import reach
from agentd.chat.markup import literal
from agentd.chat.notice import post_notice
from agentd.config import Config
from agentd.db import Database

log = logging.getLogger("agentd")


def bad_signature_id(hook: str, day: str) -> str:
    return f"hook-bad-signature-{hashlib.sha256(hook.encode()).hexdigest()[:16]}-{day}"


def bad_signature_text(hook: str, secret_env: str) -> str:
    return (
        f"⚠️ Webhook {literal(hook)}: a delivery was refused because its signature did not "
        f"match; nothing was started. If your sender made it, its secret is not the one in "
        f"{literal(secret_env)} here; if not, someone else knows the webhook's address. The "
        'log has each one ("hook signature mismatch"); I say this once a day per webhook.'
    )


class BadSignatureNotice:
    def __init__(
        self,
        config: Config,
        db: Database,
        start: Callable[..., Awaitable[Any]],
        now: Callable[[], float] = time.time,
    ) -> None:
        self._config, self._db, self._start, self._now = config, db, start, now
        # Told (or being told) this run: a flood of bad requests costs no database work.
        self._told: set[str] = set()

    async def __call__(self, hook: str, secret_env: str) -> None:
        """Best effort: a failure to tell never changes the request's answer."""
        iid = bad_signature_id(hook, time.strftime("%Y-%m-%d", time.gmtime(self._now())))
        who = owner(self._config)
        if iid in self._told or who is None:
            return
        self._told.add(iid)
        try:
            if await self._db.read(reach.private_chat, who, self._config.access.notices) is None:
                self._told.discard(iid)
                return
            text = bad_signature_text(hook, secret_env)
            await post_notice(self._start, iid, None, text, user_id=who)
        except Exception:
            self._told.discard(iid)
            log.exception("could not tell the owner of a webhook's bad signature")
