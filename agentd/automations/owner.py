"""Who the owner is, for automations: the ONE place that decides it (see `owner`)."""

from __future__ import annotations

from agentd.config import Config


def owner(config: Config) -> int | None:
    """The owner's Telegram user id, which is also their private chat's id (None: no owner).

    Until an explicit owner setting exists, the owner is the first of `[telegram]
    allowed_user_ids`, as `agentd init` writes it and as `agentd schedule add` picks it.
    """
    ids = config.telegram.allowed_user_ids
    return ids[0] if ids else None
