"""Telegram's command menu (setMyCommands), published at start from the command router."""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramNetworkError
from aiogram.types import BotCommand, BotCommandScopeChat

log = logging.getLogger("agentd.telegram")


async def publish_menu(
    bot: Bot,
    menu: list[tuple[str, str]],
    owner_menu: list[tuple[str, str]] | None = None,
    owner_id: int | None = None,
) -> bool:
    """Best effort: a menu Telegram refuses must not keep the agent from answering. Everyone
    gets `menu`; the owner's private chat gets `owner_menu` (with the owner's own commands)."""
    scoped = owner_menu is not None and owner_id is not None and owner_menu != menu
    try:
        await bot.set_my_commands(_commands(menu))
        if scoped:
            await bot.set_my_commands(
                _commands(owner_menu or []), scope=BotCommandScopeChat(chat_id=owner_id)
            )
    except (TelegramAPIError, TelegramNetworkError, TimeoutError) as exc:
        log.warning(
            "could not publish the command menu; commands still work",
            extra={"error": type(exc).__name__},
        )
        return False
    log.info("command menu published", extra={"commands": [name for name, _ in menu]})
    return True


def _commands(menu: list[tuple[str, str]]) -> list[BotCommand]:
    return [BotCommand(command=name, description=text) for name, text in menu]
