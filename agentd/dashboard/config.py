"""`[dashboard]` settings: where the dashboard listens and how long a login lasts."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, field_validator


class DashboardConfig(BaseModel):
    """`[dashboard]`: off unless enabled; loopback unless `allow_remote` says otherwise."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    # The address the owner opens (https://agent.example.org behind a reverse proxy, or a
    # tailnet name); login links use it, and an https one makes the cookie Secure.
    public_url: str = ""
    # Binding beyond loopback exposes the login page to the network: only on purpose.
    allow_remote: bool = False
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    link_minutes: float = Field(default=10.0, gt=0, le=24 * 60)

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.rstrip("/")
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("public_url must start with http:// or https://")
        return value

    @property
    def secure(self) -> bool:
        return self.public_url.startswith("https://")

    def base_url(self, port: int | None = None) -> str:
        """Where links point: the public URL, else the address the server listens on."""
        if self.public_url:
            return self.public_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port if port is not None else self.port}"


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
