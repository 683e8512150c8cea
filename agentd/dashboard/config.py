"""Where the dashboard may listen; its `[dashboard]` settings are part of the config
(`agentd.config.schema.DashboardConfig`)."""

from __future__ import annotations

import ipaddress

from agentd.config import DashboardConfig

__all__ = ["BindRefused", "DashboardConfig", "check_bind", "is_loopback"]


class BindRefused(ValueError):
    """A bind address beyond loopback without `allow_remote`."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name could resolve anywhere


def check_bind(config: DashboardConfig) -> None:
    """Refuse to listen beyond loopback unless the owner asked for it in so many words."""
    if not is_loopback(config.host) and not config.allow_remote:
        raise BindRefused(
            f"refusing to listen on {config.host}: the dashboard serves loopback only unless "
            "allow_remote = true (or --allow-remote) is set; put it behind an SSH tunnel, a "
            "reverse proxy with HTTPS or a tailnet instead (docs/dashboard.md)"
        )
