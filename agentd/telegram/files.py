"""Downloading what users send (photos) through the Bot API: getFile, then the file URL."""

from __future__ import annotations

import io

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError

from agentd.durable import NonRetryable


class TelegramFiles:
    def __init__(self, bot: Bot) -> None:
        self._bot = bot

    def handles(self, file_id: str) -> bool:
        """Telegram's file ids are opaque tokens; an id with a URI scheme (a Matrix `mxc://`
        one) is another channel's."""
        return "://" not in file_id

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        try:
            file = await self._bot.get_file(file_id)
        except TelegramAPIError as exc:
            raise NonRetryable(f"Telegram would not give the file: {exc.message}") from None
        if file.file_size and file.file_size > max_bytes:
            raise NonRetryable(f"the file is {file.file_size} bytes, over {max_bytes}")
        if not file.file_path:
            raise NonRetryable("Telegram returned no path for the file")
        buffer = io.BytesIO()
        try:
            await self._bot.download_file(file.file_path, destination=buffer)
        except Exception as exc:
            # aiohttp's error text holds the file URL, and the URL holds the bot token.
            status = getattr(exc, "status", None)
            raise RuntimeError(
                f"downloading the file failed ({type(exc).__name__}"
                + (f", HTTP {status})" if status else ")")
            ) from None
        data = buffer.getvalue()
        if len(data) > max_bytes:
            raise NonRetryable(f"the file is {len(data)} bytes, over {max_bytes}")
        return data
