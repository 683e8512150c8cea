"""Outputs routed per chat to the channel that owns it, by the chat id's block alone
(`chat.channel.id_block`): the core holds one `Outbox` and never asks which network a chat is
on. A file id goes to the channel that says it handles it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from agentd.chat.channel import id_block
from agentd.chat.outbox import Button, Outbox, SendFailed
from agentd.durable import NonRetryable

if TYPE_CHECKING:
    from agentd.chat.channel import Files


class NoChannel(SendFailed):
    """No open channel owns this chat (its channel was configured once and is not now)."""


class RoutedOutbox:
    """An `Outbox` over the open channels' outboxes, keyed by their id block."""

    def __init__(self, outboxes: Mapping[int, Outbox], callbacks: Outbox | None = None) -> None:
        if not outboxes:
            raise ValueError("no channel is open")
        self._by_block = dict(outboxes)
        # Button presses answer on the network they came from: each channel's intake answers
        # its own; this one is for a press with no channel known (none today).
        self._first = callbacks or next(iter(self._by_block.values()))

    def of(self, chat_id: int) -> Outbox:
        outbox = self._by_block.get(id_block(chat_id))
        if outbox is None:
            raise NoChannel(
                f"chat {chat_id} belongs to a channel that is not configured now; "
                "configure it again to reach this chat"
            )
        return outbox

    def split(self, markdown: str) -> list[str]:
        # Chunks are journaled before a send knows its chat: the strictest channel's split.
        best: list[str] | None = None
        for outbox in self._by_block.values():
            chunks = outbox.split(markdown)
            best = chunks if best is None or len(chunks) > len(best) else best
        return best or []

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
        return await self.of(chat_id).send_text(
            chat_id,
            markdown,
            reply_to=reply_to,
            buttons=buttons,
            preview_url=preview_url,
            draft=draft,
        )

    async def edit_text(
        self,
        chat_id: int,
        message_id: int,
        markdown: str,
        *,
        buttons: list[list[Button]] | None = None,
    ) -> None:
        await self.of(chat_id).edit_text(chat_id, message_id, markdown, buttons=buttons)

    async def send_document(
        self,
        chat_id: int,
        path: str,
        filename: str,
        *,
        caption: str = "",
        reply_to: int | None = None,
    ) -> int:
        return await self.of(chat_id).send_document(
            chat_id, path, filename, caption=caption, reply_to=reply_to
        )

    async def answer_callback(self, callback_id: str, text: str, *, alert: bool = False) -> None:
        await self._first.answer_callback(callback_id, text, alert=alert)

    async def send_draft(
        self, chat_id: int, draft_id: int, text: str, *, reply_to: int | None = None
    ) -> bool:
        outbox = self._by_block.get(id_block(chat_id))
        if outbox is None:
            return False
        return await outbox.send_draft(chat_id, draft_id, text, reply_to=reply_to)

    async def end_draft(
        self, chat_id: int, draft_id: int, note: str, *, earlier: bool = False
    ) -> None:
        outbox = self._by_block.get(id_block(chat_id))
        if outbox is not None:
            await outbox.end_draft(chat_id, draft_id, note, earlier=earlier)

    async def open_drafts(self) -> list[tuple[int, int]]:
        return [found for outbox in self._by_block.values() for found in await outbox.open_drafts()]

    async def chat_action(self, chat_id: int) -> None:
        outbox = self._by_block.get(id_block(chat_id))
        if outbox is not None:
            await outbox.chat_action(chat_id)

    @asynccontextmanager
    async def typing(self, chat_id: int) -> AsyncIterator[None]:
        outbox = self._by_block.get(id_block(chat_id))
        if outbox is None:
            yield
            return
        async with outbox.typing(chat_id):
            yield


class RoutedFiles:
    """Reads a file id through the first channel that handles it."""

    def __init__(self, files: list[Files]) -> None:
        self._files = files

    def handles(self, file_id: str) -> bool:
        return any(f.handles(file_id) for f in self._files)

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        for files in self._files:
            if files.handles(file_id):
                return await files.download(file_id, max_bytes)
        raise NonRetryable(f"no configured channel reads the file {file_id[:40]!r}")
