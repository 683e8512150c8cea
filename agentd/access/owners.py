"""Who owns the agent and who may approve.

The owner is `access.owner_id`; a config that does not set it has none, and then the
first of `access.allowed_user_ids` is the owner (said once at start-up and by `agentd
doctor`, so nobody is surprised). Approvers are `access.approvers`, or the owner alone. An
approver's own high-risk calls ask them; everyone else's ask the owner, in the owner's private
chat, never in a group.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentd.access import pairing
from agentd.config import AccessConfig


class Trust(BaseModel):
    """The owner and the approvers, and how the owner was found."""

    owner_id: int | None
    approvers: frozenset[int]
    how: Literal["configured", "first allowlisted id", "nobody"]

    def may_approve(self, user_id: int | None) -> bool:
        return user_id is not None and user_id in self.approvers

    def approver_for(self, asker: int | None) -> int | None:
        """Who answers the approval card for `asker`'s call: an approver themselves, anyone
        else the owner (None: nobody; `agentd approve` still works)."""
        if asker is not None and asker in self.approvers:
            return asker
        return self.owner_id

    def describe(self) -> str:
        """One line for the start-up log and `agentd doctor`."""
        if self.owner_id is None:
            return (
                "no owner: access.owner_id is unset and access.allowed_user_ids is empty, so "
                "high-risk calls can only be approved with `agentd approve`"
            )
        who = ", ".join(str(a) for a in sorted(self.approvers))
        if self.how == "configured":
            return f"owner {self.owner_id} (access.owner_id); approvers: {who}"
        return (
            f"owner {self.owner_id}: the first of access.allowed_user_ids, as access.owner_id "
            f"is unset (set it to make this explicit); approvers: {who}"
        )


def resolve(cfg: AccessConfig) -> Trust:
    """The owner and approvers from `[access]`."""
    if cfg.owner_id is not None:
        owner, how = cfg.owner_id, "configured"
    elif cfg.allowed_user_ids:
        owner, how = cfg.allowed_user_ids[0], "first allowlisted id"
    else:
        owner, how = None, "nobody"
    approvers = frozenset(cfg.approvers) or (
        frozenset({owner}) if owner is not None else frozenset()
    )
    return Trust(owner_id=owner, approvers=approvers, how=how)  # type: ignore[arg-type]


def configured_ids(cfg: AccessConfig) -> frozenset[int]:
    """Everyone the configuration serves: the allowlist, the owner and the approvers."""
    trust = resolve(cfg)
    owner = {trust.owner_id} if trust.owner_id is not None else set()
    return frozenset(cfg.allowed_user_ids) | owner | trust.approvers


def is_served(conn: Any, cfg: AccessConfig, user_id: int) -> bool:
    """Whether `user_id` is served now: configured, or paired and not removed since."""
    return user_id in configured_ids(cfg) or user_id in pairing.paired_ids(conn)
