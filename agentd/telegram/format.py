"""Telegram's HTML and limits (R-TG-1, R-TG-2): the Markdown is rendered by `chat.format`
and split by `chat.split`, the renderer and splitter every channel shares.

Pure functions: no aiogram here, so the formatting is testable and the CLI could reuse it.
"""

from __future__ import annotations

from agentd.chat.format import Markup, to_html
from agentd.chat.split import split_markdown as split_to_fit

TELEGRAM_LIMIT = 4096
# Telegram's HTML: <s> strikes through, a newline is a line break, tg:// links open in the app.
TELEGRAM = Markup(schemes=("https", "http", "tg"))


def utf16_len(text: str) -> int:
    """Telegram measures text in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _fits(markdown: str, limit: int) -> bool:
    return utf16_len(to_html(markdown, TELEGRAM)) <= limit and utf16_len(markdown) <= limit


def split_markdown(markdown: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split an answer into ordered chunks whose HTML and plain forms both fit Telegram's limit."""
    return split_to_fit(markdown, lambda text: _fits(text, limit))
