"""What a turn starts from: a normalised chat message, or a schedule's, a webhook's or a
watched mailbox's prompt (no aiogram types)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

MAX_TEXT_CHARS = 100_000


class ReplyContext(BaseModel):
    """The earlier message a user replied to (R-VIS-3)."""

    message_id: int
    text: str = ""
    from_bot: bool = False
    photo_file_id: str | None = None
    # A forward: its words are someone else's wherever it is quoted, even once its own row
    # is gone from the history (retention) and cannot say so.
    forwarded: bool = False
    # The quote is the replying sender's own copy of the message (a Matrix reply's fallback,
    # which their client writes), not the message as the server or agentd knows it: whoever
    # wrote the message quoted, these words are only the sender's.
    unverified: bool = False


class MediaRef(BaseModel):
    """A voice note, audio file, round video or document the message carries (file id only)."""

    kind: Literal["voice", "audio", "video_note", "document"]
    file_id: str
    file_name: str = ""
    mime_type: str = ""
    file_size: int = 0
    duration: float = 0.0  # seconds, for voice, audio and video notes
    forwarded: bool = False  # someone else's words: its transcript is data, not the user's


# Where a message is, as its channel says it: "private" is a chat of one user with the agent,
# "group" one that others read too, "channel" a broadcast the agent posts in. Every privacy and
# owner guard reads this (`private` below), never a network's id numbering.
ChatKind = Literal["private", "group", "channel"]


class Place(BaseModel):
    """The kind of chat an input came from; the channel adapter sets it on every input."""

    chat_kind: ChatKind

    @property
    def private(self) -> bool:
        """Only the user and the agent read this chat."""
        return self.chat_kind == "private"


# Where a turn comes from. Only a chat message has a Telegram update and message to answer;
# a schedule, a webhook delivery or a watched mailbox starts a turn on the owner's behalf.
Origin = Literal["chat", "schedule", "webhook", "mail"]


class TurnInput(Place):
    origin: Origin
    update_id: int | None = None  # chat only
    chat_id: int
    user_id: int
    message_id: int | None = None  # chat only (None: a message whose id could not be read)
    date: float
    kind: Literal["text", "photo", "voice", "document", "unsupported"]
    text: str = Field(default="", max_length=MAX_TEXT_CHARS)
    edited: bool = False
    # For an edit (agent/edits.py): the turn it replaced before any answer, or the text of
    # the answered message it corrects.
    replaces: str | None = None
    corrects: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    # Sent while that turn worked, with `[chat] busy = "steer"` (chat/busy.py): the working
    # turn may take this text at its next model call; then this turn only records it.
    steer_into: str | None = None
    unsupported_kind: str | None = None
    photo_file_id: str | None = None
    reply_to: ReplyContext | None = None
    media: MediaRef | None = None
    # Set when a prompt schedule runs this turn on the owner's behalf (no Telegram message).
    schedule_id: str | None = None
    # Who set that schedule up, in words ("you, from the command line"); `scheduled_after`
    # lists the outside content the setting-up turn had read (empty: the user's own words).
    scheduled_by: str = ""
    scheduled_after: str = ""
    # Text that came from outside the chat, not from the user (a webhook's body), in words:
    # it taints the turn like a forwarded message, and its URLs are not the user's.
    outside_source: str = ""
    # A forwarded message: someone else's words, kept as data; who wrote it, when known.
    forwarded: bool = False
    forwarded_from: str = ""
    # The sender's Telegram client language (IETF tag, "de", "pt-br"); "" when not sent.
    language_code: str = Field(default="", max_length=35)

    @model_validator(mode="before")
    @classmethod
    def _origin_of_journaled_input(cls, data: Any) -> Any:
        """Inputs journaled without `origin` still load. They all had both Telegram ids, zero
        where there was no message (Telegram's ids start at 1)."""
        if not isinstance(data, dict) or "origin" in data or "update_id" not in data:
            return data
        data = {k: v for k, v in data.items() if k not in ("update_id", "message_id") or v}
        if "update_id" in data:
            data["origin"] = "chat"
        elif data.get("schedule_id"):
            data["origin"] = "schedule"
        elif data.get("outside_source"):
            data["origin"] = "webhook"  # the only other producer of outside text
        else:
            data["origin"] = "mail"  # a watched mailbox's summary turn
        return data

    @model_validator(mode="after")
    def _telegram_ids_only_for_chat(self) -> TurnInput:
        if self.origin == "chat" and self.update_id is None:
            raise ValueError("a chat turn needs the Telegram update id")
        if self.origin != "chat" and (self.update_id, self.message_id) != (None, None):
            raise ValueError(f"a {self.origin} turn has no Telegram message")
        return self


class TurnOutput(BaseModel):
    reply_message_ids: list[int] = Field(default_factory=list)
    llm_calls: int = 0
    outcome: Literal[
        "answered", "unsupported", "error", "step_limit", "rate_limited", "not_heard", "steered"
    ] = "answered"


class CallbackPress(BaseModel):
    """A press on an inline button."""

    update_id: int
    callback_id: str
    user_id: int
    chat_id: int | None = None
    # None: the button's chat is unknown (a message sent inline), which no guard takes as private.
    chat_kind: ChatKind | None

    @property
    def private(self) -> bool:
        return self.chat_kind == "private"

    message_id: int | None = None
    data: str = ""
