"""`[matrix]`: the Matrix channel's own settings, declared through the channel door
(`SECTION`, `agentd.config.sections`). Absent: the channel is off and mautrix never imported.
Whether rooms with more people are answered is `[access] allow_groups`, as on every channel."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from agentd.config import Config
from agentd.config.sections import Section


class MatrixConfig(BaseModel):
    """agentd logs in as `user_id` on `homeserver`, with the access token in
    `access_token_env` or else the password in `password_env` (then always on one device
    derived from `user_id`: the server's transaction-id dedup is per device)."""

    model_config = ConfigDict(extra="forbid")

    homeserver: str = Field(pattern=r"^https?://[^\s/]+")
    user_id: str = Field(pattern=r"^@[^:\s]+:[^\s]+$")
    access_token_env: str = "MATRIX_ACCESS_TOKEN"
    password_env: str = "MATRIX_PASSWORD"
    # The owner's Matrix account: the same agentd user as the Telegram owner (one memory,
    # schedules, budget and approvals); its answers to approval cards count.
    owner: str = Field(default="", pattern=r"^(@[^:\s]+:[^\s]+)?$")
    allowed_users: list[str] = Field(default_factory=list)  # Matrix user ids also served
    sync_timeout: int = Field(default=30, ge=0, le=120)  # seconds a /sync long poll waits
    request_timeout: float = Field(default=20.0, gt=0)  # seconds per request; syncs add theirs
    max_file_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)  # files in and out
    max_message_chars: int = Field(default=16_000, ge=256, le=60_000)


SECTION = Section(
    "matrix", MatrixConfig, optional=True, moved={"allow_groups": "access.allow_groups"}
)


def settings(config: Config) -> MatrixConfig | None:
    """`[matrix]` of `config`, or None: the channel is off."""
    return SECTION.of(config)
