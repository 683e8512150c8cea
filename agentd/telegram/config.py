"""`[telegram]`: the Bot API channel's own settings, declared through the channel door
(`SECTION`, `agentd.config.sections`). Who is served and whether groups are answered are
`[access]`'s; how answers are shown while written is `[chat]`'s."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from agentd.config import Config
from agentd.config.secrets import read_secret
from agentd.config.sections import Section


class TelegramConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The name of the secret that holds the bot token (from @BotFather): read like every secret
    # (agentd.config.secrets.read_secret), so a systemd credential named `telegram_bot_token`
    # works too. The channel is on when it is set.
    token_env: str = "TELEGRAM_BOT_TOKEN"
    api_base: str = "https://api.telegram.org"
    poll_timeout: int = Field(default=30, ge=0, le=50)
    max_message_chars: int = Field(default=4096, ge=64, le=4096)
    send_retries: int = Field(default=5, ge=0, le=20)
    max_retry_after: float = Field(default=300.0, gt=0)
    retry_base_delay: float = Field(default=0.5, gt=0)  # first backoff of any Bot API call
    max_backoff: float = Field(default=5.0, gt=0)  # ceiling of backoffs (not of retry_after)
    request_timeout: float = Field(default=20.0, gt=0)  # seconds per call; polls add poll_timeout


SECTION = Section(
    "telegram",
    TelegramConfig,
    moved={
        # Who is served, and where, is said once for every channel.
        "allowed_user_ids": "access.allowed_user_ids",
        "owner_id": "access.owner_id",
        "approvers": "access.approvers",
        "allow_groups": "access.allow_groups",
        # Answers shown while written, on every channel that can.
        "streaming": "chat.streaming",
        "stream_interval": "chat.stream_interval",
        "progress_delay": "chat.progress_delay",
    },
)


def settings(config: Config) -> TelegramConfig:
    """`[telegram]` of `config` (its defaults when the section is absent)."""
    found = SECTION.of(config)
    assert found is not None  # not optional: absent is the defaults
    return found


def bot_token(config: Config, env: Mapping[str, str] | None = None) -> SecretStr | None:
    """The bot token, read now (this process's environment unless `env`); None when unset."""
    value = read_secret(settings(config).token_env, config.secret_source(env))
    return SecretStr(value) if value else None
