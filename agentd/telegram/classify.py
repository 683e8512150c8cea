"""Decide what an incoming update is and whether it is served (R-IN-3…5). Works on plain dicts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentd.chat.inputs import (
    MAX_TEXT_CHARS,
    CallbackPress,
    ChatKind,
    MediaRef,
    ReplyContext,
    TurnInput,
)
from agentd.chat.locale import language_of

UNSUPPORTED_KINDS = (
    "sticker",
    "voice",
    "video_note",
    "video",
    "audio",
    "document",
    "animation",
    "location",
    "venue",
    "contact",
    "poll",
    "dice",
    "game",
    "story",
    "paid_media",
    "invoice",
)


def chat_kind(chat: Any) -> ChatKind:
    """Telegram's chat type as agentd's kind of chat: a supergroup is a group. A chat whose
    type is missing or unknown is a group, where nothing private is shown."""
    kind = chat.get("type") if isinstance(chat, dict) else None
    if kind == "private":
        return "private"
    return "channel" if kind == "channel" else "group"


def kind_of_chat_id(chat_id: int) -> ChatKind:
    """A chat's kind from its id alone, where Telegram gave no chat object: private chats
    have their user's (positive) id, groups and channels negative ones."""
    return "private" if chat_id > 0 else "group"


UNREADABLE = "unreadable"  # an update whose fields make no sense (wrong types, missing parts)
MAX_REPLY_CHARS = 4000  # the quoted message is context only; it need not be whole


class UpdateDecision(BaseModel):
    action: Literal["turn", "callback", "reject", "ignore", "leave"]
    update_kind: str
    chat_id: int | None = None
    user_id: int | None = None
    reason: str = ""
    turn: TurnInput | None = None
    callback: CallbackPress | None = None


class Identity(BaseModel):
    """Who the bot is, from getMe, and who it serves."""

    bot_id: int = 0
    bot_username: str = ""
    allowed_user_ids: frozenset[int] = frozenset()
    allow_groups: bool = False


AUDIO_KINDS = ("voice", "audio", "video_note")  # transcribed: the words become the message


def _message_kind(message: dict[str, Any]) -> tuple[str, str | None]:
    if message.get("text") is not None:
        return "text", None
    if message.get("photo"):
        return "photo", None
    if _media(message) is not None:
        return ("document" if message.get("document") else "voice"), None
    for kind in UNSUPPORTED_KINDS:
        if message.get(kind) is not None:
            return "unsupported", kind
    return "unsupported", "message"


def _media(message: dict[str, Any]) -> MediaRef | None:
    """The voice note, audio, round video or document in the message, if it is well formed."""
    for kind in (*AUDIO_KINDS, "document"):
        item = message.get(kind)
        if isinstance(item, dict) and isinstance(item.get("file_id"), str):
            return MediaRef(
                kind=kind,  # type: ignore[arg-type]
                file_id=item["file_id"],
                file_name=str(item.get("file_name") or "")[:200],
                mime_type=str(item.get("mime_type") or "")[:100],
                file_size=int(item.get("file_size") or 0),
                duration=float(item.get("duration") or 0),
                forwarded=_is_forwarded(message),
            )
    return None


def _is_forwarded(message: dict[str, Any]) -> bool:
    return bool(message.get("forward_origin") or message.get("forward_date"))


def _forward_author(message: dict[str, Any]) -> str:
    """Who wrote a forwarded message, as the Bot API's MessageOrigin says (cut, never trusted)."""
    origin = message.get("forward_origin")
    if not isinstance(origin, dict):
        return ""
    user = origin.get("sender_user") or {}
    chat = origin.get("sender_chat") or origin.get("chat") or {}
    name = (
        " ".join(p for p in (user.get("first_name"), user.get("last_name")) if p)
        or origin.get("sender_user_name")
        or chat.get("title")
        or ""
    )
    return str(name)[:80]


def _largest_photo(message: dict[str, Any]) -> str | None:
    photos = message.get("photo") or []
    if not photos:
        return None
    return max(photos, key=lambda p: p.get("width", 0) * p.get("height", 0))["file_id"]


def _utf16_slice(text: str, offset: int, length: int) -> tuple[str, str, str]:
    """Text before, inside and after an entity (Telegram counts UTF-16 code units)."""
    units = text.encode("utf-16-le")
    cut = (2 * offset, 2 * (offset + length))

    def part(raw: bytes) -> str:
        return raw.decode("utf-16-le", errors="replace")

    return part(units[: cut[0]]), part(units[cut[0] : cut[1]]), part(units[cut[1] :])


def _addressed_in_group(message: dict[str, Any], me: Identity) -> tuple[bool, str]:
    """Whether a group message is for the bot: a reply to it, or a mention *entity* naming it
    exactly (a substring would count `@mybot_evil` and `email@mybot.example`), or a command
    addressed to it (`/help@mybot`). The mention itself is taken out of the text."""
    text = message.get("text") or message.get("caption") or ""
    entities = message.get("entities") if message.get("text") else message.get("caption_entities")
    replied = (message.get("reply_to_message") or {}).get("from", {}).get("id") == me.bot_id
    mention = f"@{me.bot_username}".lower() if me.bot_username else None
    for entity in entities if isinstance(entities, list) else []:
        if not isinstance(entity, dict):
            continue
        kind, offset, length = entity.get("type"), entity.get("offset"), entity.get("length")
        if not isinstance(offset, int) or not isinstance(length, int):
            continue
        before, inside, after = _utf16_slice(text, offset, length)
        if kind == "mention" and mention and inside.lower() == mention:
            return True, (before + after).strip()
        if kind == "text_mention" and (entity.get("user") or {}).get("id") == me.bot_id:
            return True, text
        if kind == "bot_command" and mention and inside.lower().endswith(mention):
            return True, text
    return replied, text


def _reply_context(message: dict[str, Any], me: Identity) -> ReplyContext | None:
    replied = message.get("reply_to_message")
    if not replied:
        return None
    return ReplyContext(
        message_id=replied.get("message_id", 0),
        text=(replied.get("text") or replied.get("caption") or "")[:MAX_REPLY_CHARS],
        from_bot=replied.get("from", {}).get("id") == me.bot_id,
        photo_file_id=_largest_photo(replied),
        forwarded=bool(replied.get("forward_origin")),
    )


def classify_update(update: dict[str, Any], me: Identity) -> UpdateDecision:
    """Map a raw Bot API update to what agentd does with it."""
    update_id = int(update.get("update_id", 0))
    if "callback_query" in update:
        return _classify_press(update_id, update["callback_query"], me)
    if "my_chat_member" in update:
        return _classify_membership(update["my_chat_member"], me)
    edited = "edited_message" in update
    message = update.get("message") or update.get("edited_message")
    if not isinstance(message, dict):
        kind = next((k for k in update if k != "update_id"), "unknown")
        return UpdateDecision(action="ignore", update_kind=kind, reason="update kind not served")
    return _classify_message(update_id, message, edited, me)


def _classify_membership(change: dict[str, Any], me: Identity) -> UpdateDecision:
    """The bot was added to (or removed from) a chat. A group nobody served added it to, or
    any group while groups are off, is left: its members are strangers to the owner."""
    chat = change.get("chat") or {}
    chat_id, by = chat.get("id"), (change.get("from") or {}).get("id")
    status = (change.get("new_chat_member") or {}).get("status")
    joined = status in ("member", "administrator", "restricted")
    if not joined or chat.get("type", "private") == "private" or not isinstance(chat_id, int):
        return UpdateDecision(
            action="ignore",
            update_kind="my_chat_member",
            chat_id=chat_id,
            user_id=by,
            reason="membership change",
        )
    if not me.allow_groups:
        reason = "group chats are disabled"
    elif by not in me.allowed_user_ids:
        reason = "added to a group by someone not served"
    else:
        return UpdateDecision(
            action="ignore",
            update_kind="my_chat_member",
            chat_id=chat_id,
            user_id=by,
            reason="added to a group by a served user",
        )
    return UpdateDecision(
        action="leave", update_kind="my_chat_member", chat_id=chat_id, user_id=by, reason=reason
    )


def _classify_press(update_id: int, query: dict[str, Any], me: Identity) -> UpdateDecision:
    user_id = (query.get("from") or {}).get("id")
    message = query.get("message") or {}
    chat_id = (message.get("chat") or {}).get("id")
    if user_id not in me.allowed_user_ids:
        return UpdateDecision(
            action="reject",
            update_kind="callback_query",
            user_id=user_id,
            chat_id=chat_id,
            reason="user not in allowlist",
        )
    return UpdateDecision(
        action="callback",
        update_kind="callback_query",
        user_id=user_id,
        chat_id=chat_id,
        callback=CallbackPress(
            update_id=update_id,
            callback_id=str(query.get("id", "")),
            user_id=user_id,
            chat_id=chat_id,
            chat_kind=chat_kind(message.get("chat")) if chat_id is not None else None,
            message_id=message.get("message_id"),
            data=str(query.get("data") or "")[:256],
        ),
    )


def _classify_message(
    update_id: int, message: dict[str, Any], edited: bool, me: Identity
) -> UpdateDecision:
    update_kind = "edited_message" if edited else "message"
    user_id = (message.get("from") or {}).get("id")
    chat = message.get("chat") or {}
    chat_id = chat.get("id")
    if user_id is None or chat_id is None:
        return UpdateDecision(action="ignore", update_kind=update_kind, reason="no sender")
    if user_id not in me.allowed_user_ids:
        return UpdateDecision(
            action="reject",
            update_kind=update_kind,
            user_id=user_id,
            chat_id=chat_id,
            reason="user not in allowlist",
        )
    text = message.get("text") or message.get("caption") or ""
    where = chat_kind(chat) if "type" in chat else kind_of_chat_id(chat_id)
    if where != "private":
        if not me.allow_groups:  # a served user's group while groups are off: leave it
            return UpdateDecision(
                action="leave",
                update_kind=update_kind,
                user_id=user_id,
                chat_id=chat_id,
                reason="group chats are disabled",
            )
        addressed, text = _addressed_in_group(message, me)
        if not addressed:
            return UpdateDecision(
                action="ignore",
                update_kind=update_kind,
                user_id=user_id,
                chat_id=chat_id,
                reason="not addressed to the bot",
            )
    kind, unsupported = _message_kind(message)
    turn = TurnInput(
        origin="chat",
        update_id=update_id,
        chat_id=chat_id,
        chat_kind=where,
        user_id=user_id,
        message_id=int(message["message_id"]) if "message_id" in message else None,
        date=float(message.get("edit_date") or message.get("date") or 0),
        kind=kind,  # type: ignore[arg-type]
        text=text[:MAX_TEXT_CHARS],
        edited=edited,
        unsupported_kind=unsupported,
        photo_file_id=_largest_photo(message),
        reply_to=_reply_context(message, me),
        media=_media(message),
        forwarded=_is_forwarded(message),
        forwarded_from=_forward_author(message),
        language_code=language_of(message.get("from")),
    )
    return UpdateDecision(
        action="turn", update_kind=update_kind, user_id=user_id, chat_id=chat_id, turn=turn
    )


def _int_at(value: Any, *path: str) -> int | None:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unreadable(update: dict[str, Any], me: Identity, reason: str) -> UpdateDecision:
    """An update classify_update() could not read: an allowlisted user in a private chat is
    told so."""
    message = update.get("message") or update.get("edited_message")
    chat_id, user_id = _int_at(message, "chat", "id"), _int_at(message, "from", "id")
    served = user_id is not None and user_id in me.allowed_user_ids
    if chat_id is None or not served or kind_of_chat_id(chat_id) != "private":
        return UpdateDecision(
            action="ignore",
            update_kind="malformed",
            chat_id=chat_id,
            user_id=user_id,
            reason=reason,
        )
    turn = TurnInput(
        origin="chat",
        update_id=int(update["update_id"]),
        chat_id=chat_id,
        chat_kind="private",
        user_id=user_id,
        message_id=_int_at(message, "message_id"),
        date=0.0,
        kind="unsupported",
        unsupported_kind=UNREADABLE,
    )
    return UpdateDecision(
        action="turn",
        update_kind="malformed",
        chat_id=chat_id,
        user_id=user_id,
        reason=reason,
        turn=turn,
    )
