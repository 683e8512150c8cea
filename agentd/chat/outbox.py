"""What a workflow may say to the user, independent of the chat platform (no aiogram here)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from pydantic import BaseModel, Field


class Button(BaseModel):
    text: str
    data: str = Field(max_length=64)  # Telegram's callback_data limit, in bytes for ASCII


class SendFailed(Exception):
    """The platform refused the message for good (blocked bot, bad chat): retrying won't help."""


class SendDelayed(Exception):
    """The platform could not be reached, or failed for a passing reason, after the channel's
    own retries (an outage): the send may be tried again later."""


class Outbox(Protocol):
    def split(self, markdown: str) -> list[str]:
        """The answer in chunks that each fit one message on this platform (deterministic)."""
        ...

    async def send_text(
        self,
        chat_id: int,
        markdown: str,
        *,
        reply_to: int | None = None,
        buttons: list[list[Button]] | None = None,
        preview_url: str | None = None,
        draft: int | None = None,
    ) -> int:
        """Send one chunk; return its message id. SendFailed: refused for good; SendDelayed:
        not reached (an outage), worth trying again later.

        No link preview unless `preview_url` (a URL the user wrote): a preview is a fetch by
        the platform's servers, of a URL the model may have been led to write.

        `draft`: the id of the drafts (`send_draft`) this chunk is the answer of. Where a
        draft is a message (Matrix), this chunk takes its place; a send without it (a
        command's reply, a reminder, a notice) never touches a draft streaming meanwhile.
        """
        ...

    async def edit_text(
        self,
        chat_id: int,
        message_id: int,
        markdown: str,
        *,
        buttons: list[list[Button]] | None = None,
    ) -> None: ...

    async def send_document(
        self,
        chat_id: int,
        path: str,
        filename: str,
        *,
        caption: str = "",
        reply_to: int | None = None,
    ) -> int: ...

    # Best effort by nature: these never raise (cancellation aside).
    async def answer_callback(
        self, callback_id: str, text: str, *, alert: bool = False
    ) -> None: ...

    async def send_draft(
        self, chat_id: int, draft_id: int, text: str, *, reply_to: int | None = None
    ) -> bool:
        """The answer so far (streaming), to the message `reply_to` as the answer will be;
        `draft_id` is the answer's (agent/streaming.py `answer_draft`), the same on every
        call and model call of it, and its first chunk is sent with `draft=draft_id`."""
        ...

    async def end_draft(
        self, chat_id: int, draft_id: int, note: str, *, earlier: bool = False
    ) -> None:
        """The answer of these drafts will not come (its turn was stopped or failed): what
        the chat shows of them must not pass for an answer; where it stays (a message), it
        ends with `note` (Markdown, the user's language). Doing it again does no harm.
        `earlier`: the turn began before this process, so an earlier one may have sent a
        draft it never wrote down (where a draft is a message, it is looked for)."""
        ...

    async def open_drafts(self) -> list[tuple[int, int]]:
        """(chat id, draft id) of each draft that outlives its process (a message) and was
        neither replaced by its answer nor ended yet; [] where a draft goes with its process.
        Best effort: [] when they cannot be read."""
        ...

    async def chat_action(self, chat_id: int) -> None: ...

    def typing(self, chat_id: int) -> AbstractAsyncContextManager[None]: ...


def raise_if_refused(exc: Exception) -> None:
    """A send the platform refused for good (blocked, bad chat): retrying the step cannot help."""
    from agentd.durable import NonRetryable

    if isinstance(exc, SendFailed):
        raise NonRetryable(str(exc)) from None
