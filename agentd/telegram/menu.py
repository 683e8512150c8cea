"""Telegram's command menu (setMyCommands), published at start from the command router."""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramNetworkError
from aiogram.types import BotCommand

log = logging.getLogger("agentd.telegram")


async def publish_menu(bot: Bot, menu: list[tuple[str, str]]) -> bool:
    """Best effort: a menu Telegram refuses must not keep the agent from answering."""
    commands = [BotCommand(command=name, description=text) for name, text in menu]
    try:
        await bot.set_my_commands(commands)
    except (TelegramAPIError, TelegramNetworkError, TimeoutError) as exc:
        log.warning(
            "could not publish the command menu; commands still work",
            extra={"error": type(exc).__name__},
        )
        return False
    log.info("command menu published", extra={"commands": [name for name, _ in menu]})
    return True
