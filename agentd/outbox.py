"""What a workflow may say to the user, independent of the chat platform (no aiogram here)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from pydantic import BaseModel, Field


class Button(BaseModel):
    text: str
    data: str = Field(max_length=64)  # Telegram's callback_data limit, in bytes for ASCII


class Outbox(Protocol):
    async def send_text(
        self,
        chat_id: int,
        markdown: str,
        *,
        reply_to: int | None = None,
        buttons: list[list[Button]] | None = None,
    ) -> int: ...

    async def edit_text(
        self,
        chat_id: int,
        message_id: int,
        markdown: str,
        *,
        buttons: list[list[Button]] | None = None,
    ) -> None: ...

    async def answer_callback(
        self, callback_id: str, text: str, *, alert: bool = False
    ) -> None: ...

    async def send_draft(self, chat_id: int, draft_id: int, text: str) -> bool: ...

    async def chat_action(self, chat_id: int) -> None: ...

    def typing(self, chat_id: int) -> AbstractAsyncContextManager[None]: ...


def raise_if_refused(exc: Exception) -> None:
    """A send the platform refused for good (blocked, bad chat): retrying the step cannot help."""
    from agentd.durable import NonRetryable
    from agentd.telegram.output import SendFailed  # aiogram is imported only once a send failed

    if isinstance(exc, SendFailed):
        raise NonRetryable(str(exc)) from None
