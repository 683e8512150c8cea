"""Build the aiogram Bot for the configured Bot API server."""

from __future__ import annotations

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.utils.token import TokenValidationError

from agentd.config import Config


class TokenMissing(Exception):
    pass


def make_bot(config: Config) -> Bot:
    token = config.secrets.telegram_bot_token
    if token is None:
        raise TokenMissing(
            "TELEGRAM_BOT_TOKEN is not set; export it (or use a systemd credential named "
            "telegram_bot_token) — get a token from @BotFather"
        )
    session = AiohttpSession(api=TelegramAPIServer.from_base(config.telegram.api_base))
    try:
        return Bot(token.get_secret_value(), session=session)
    except TokenValidationError:
        raise TokenMissing(
            "TELEGRAM_BOT_TOKEN does not look like a bot token (expected digits:letters from "
            "@BotFather)"
        ) from None
