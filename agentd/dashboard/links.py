"""One-time login links: what `agentd dashboard` prints and `/dashboard` in the owner's
private chat sends."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agentd.dashboard import auth
from agentd.dashboard.config import DashboardConfig

# `Redactor.learn` of the process that makes the link.
Learn = Callable[[Iterable[str]], object]


def login_link(
    conn: Any, settings: DashboardConfig, made_by: str, port: int | None, *, learn: Learn
) -> str:
    """A link that signs in once within `link_minutes` (run inside the caller's transaction;
    the database is migrated: m028_dashboard holds the links). Its token is taught to the
    process's redactor first: a log line or an error that quotes the live link (a send that
    failed, a request aiohttp could not parse) would sign in whoever reads it."""
    token = auth.new_login(conn, minutes=settings.link_minutes, made_by=made_by)
    learn([token])
    return f"{settings.base_url(port)}/login?t={token}"
