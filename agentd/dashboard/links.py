"""One-time login links: what `agentd dashboard` prints and `/dashboard` in the owner's
private chat sends."""

from __future__ import annotations

from typing import Any

from agentd.dashboard import auth
from agentd.dashboard.config import DashboardConfig


def login_link(conn: Any, settings: DashboardConfig, made_by: str, port: int | None = None) -> str:
    """A link that signs in once within `link_minutes` (run inside the caller's transaction;
    the database is migrated: m028_dashboard holds the links)."""
    token = auth.new_login(conn, minutes=settings.link_minutes, made_by=made_by)
    return f"{settings.base_url(port)}/login?t={token}"
