"""Test outboxes shared by several modules."""

from __future__ import annotations

from typing import Any

from agentd.chat.outbox import SendFailed
from agentd.telegram.format import split_markdown


class LimitedOutbox:
    """An outbox that, like Telegram, refuses a message over its limit."""

    limit = 200

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def split(self, markdown: str) -> list[str]:
        return split_markdown(markdown, self.limit)

    async def send_text(self, chat_id: int, markdown: str, **kw: Any) -> int:
        if len(markdown) > self.limit:
            raise SendFailed("Telegram refused the message: message is too long")
        self.sent.append({"chat_id": chat_id, "text": markdown, **kw})
        return len(self.sent)
