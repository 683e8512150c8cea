"""Build the aiogram Bot for the configured Bot API server, with agentd's retry policy."""

from __future__ import annotations

from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiogram.utils.token import TokenValidationError

from agentd.config import Config
from agentd.telegram.config import bot_token, settings
from agentd.telegram.session import (
    BotSession,
    OnUncertain,
    RetryMiddleware,
    RetryPolicy,
    lenient_json_loads,
)


class TokenMissing(Exception):
    pass


def retry_policy(config: Config) -> RetryPolicy:
    tg = settings(config)
    return RetryPolicy(
        retries=tg.send_retries,
        base_delay=tg.retry_base_delay,
        max_backoff=tg.max_backoff,
        max_retry_after=tg.max_retry_after,
    )


def make_bot(config: Config, on_uncertain: OnUncertain | None = None) -> Bot:
    """The Bot; every call it makes goes through one RetryMiddleware (see session.py)."""
    token, name = bot_token(config), settings(config).token_env
    if token is None:
        raise TokenMissing(
            f"{name} is not set; export it (or use a systemd credential named "
            f"{name.lower()}) — get a token from @BotFather"
        )
    session = BotSession(
        api=TelegramAPIServer.from_base(settings(config).api_base),
        json_loads=lenient_json_loads,
        timeout=settings(config).request_timeout,
    )
    session.middleware(RetryMiddleware(retry_policy(config), on_uncertain=on_uncertain))
    try:
        return Bot(token.get_secret_value(), session=session)
    except TokenValidationError:
        raise TokenMissing(
            f"{name} does not look like a bot token (expected digits:letters from @BotFather)"
        ) from None
