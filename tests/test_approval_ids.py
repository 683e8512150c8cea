"""Approval ids: unguessable, and usable as a CLI argument."""

from __future__ import annotations

from agentd.access import approvals


def test_approval_ids_never_look_like_cli_options() -> None:
    """Regression: about 1 in 64 token_urlsafe ids began with "-" and broke `agentd approve`."""
    ids = [approvals.new_id() for _ in range(3000)]
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 12 for i in ids) and len(set(ids)) == len(ids)
