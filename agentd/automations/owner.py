"""Who the owner is, for automations: the ONE place that decides it (see `owner`)."""

from __future__ import annotations

from agentd.access import owners
from agentd.config import Config


def owner(config: Config) -> int | None:
    """The owner's Telegram user id, which is also their private chat's id (None: no owner).

    The owner every other part of agentd knows (access/owners.py): `[access] owner_id`, or,
    where a config predates it, the first of `allowed_user_ids` (as `agentd init` writes it).
    ask_owner's questions, /run and failure notices follow it.
    """
    return owners.resolve(config.access).owner_id
