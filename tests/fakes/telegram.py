"""A fake Telegram Bot API server speaking the real wire format, for the real aiogram client.

In-process: ``with FakeTelegram.running() as tg: ... tg.base_url``; as a process:
``python -m tests.fakes.telegram --port N`` (prints the base URL), driven via ``/_fake/...``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
import re
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web

from tests.fakes._server import FakeServer, sleep_or_closing
from tests.fakes._tg_html import HtmlError, parse_html

TOKEN_RE = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
MAX_TEXT = 4096
MAX_DOWNLOAD = 20 * 1024 * 1024
MAX_UPLOAD = 50 * 1024 * 1024  # what a bot may upload with sendDocument
# Form fields aiogram sends as JSON strings (nested objects and lists).
JSON_FIELDS = {
    "reply_markup",
    "allowed_updates",
    "entities",
    "caption_entities",
    "reply_parameters",
    "link_preview_options",
    "commands",
    "scope",
    "media",
    "reaction",
}
CHAT_ACTIONS = {
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
}
# Telegram leaves these out unless allowed_updates names them explicitly.
OPT_IN_UPDATES = {"chat_member", "message_reaction", "message_reaction_count"}
DEFAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    404: "Not Found",
    409: "Conflict: terminated by other getUpdates request; "
    "make sure that only one bot instance is running",
    500: "Internal Server Error",
    502: "Bad Gateway",
}
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)


class TelegramError(Exception):
    """Raised by method handlers; becomes an ``{"ok": false, ...}`` answer."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


@dataclass
class Fault:
    """A scripted failure for the next calls of one method ("*" = any)."""

    method: str
    status: int = 500
    description: str = ""
    retry_after: int | None = None
    times: int | None = 1  # None: until clear_faults()
    mode: str = "error"  # error | drop | malformed | delay | land
    delay: float = 0.0


def _now() -> int:
    return int(time.time())


def _without_bytes(params: dict[str, Any]) -> dict[str, Any]:
    """Request params as recorded: an upload keeps its name, size and type, not its bytes."""
    return {
        k: {kk: vv for kk, vv in v.items() if kk != "data"} if isinstance(v, dict) else v
        for k, v in params.items()
    }


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _int(params: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = params.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TelegramError(400, f"Bad Request: invalid {key} specified") from None


def _bool(params: dict[str, Any], key: str) -> bool:
    value = params.get(key)
    return value is True or (isinstance(value, str) and value.lower() in ("true", "1"))


_MENTION = re.compile(r"(?<![A-Za-z0-9_])@[A-Za-z0-9_]{5,32}(?![A-Za-z0-9_])")


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def auto_entities(text: str) -> list[dict[str, Any]]:
    """The entities Telegram's server adds to a plain text: a leading bot command and each
    @username mention, with offsets and lengths in UTF-16 code units."""
    found = []
    command_end = 0
    if text.startswith("/"):
        command_end = len(text.split()[0])
        found.append({"type": "bot_command", "offset": 0, "length": _utf16_len(text[:command_end])})
    for match in _MENTION.finditer(text):
        if match.start() < command_end:
            continue  # the @bot of "/help@bot" is part of the command
        found.append(
            {
                "type": "mention",
                "offset": _utf16_len(text[: match.start()]),
                "length": _utf16_len(match[0]),
            }
        )
    return found


def _kind(chat_id: int) -> str:
    return "supergroup chat" if chat_id < -1_000_000_000_000 else "group chat"


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height of a PNG or JPEG, read from its header; None if unknown."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
        return w, h
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                return None
            marker, length = data[i + 1], struct.unpack(">H", data[i + 2 : i + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2):  # start of frame: height, width follow
                h, w = struct.unpack(">HH", data[i + 5 : i + 9])
                return w, h
            i += 2 + length
    return None


class FakeTelegram(FakeServer):
    """Fake Telegram Bot API server (Bot API JSON over HTTP, long polling, files)."""

    def __init__(
        self,
        *,
        token: str | None = None,
        bot_username: str = "fake_bot",
        bot_first_name: str = "Fake Bot",
        strict_chats: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        """token: only this token is accepted (others get 401); strict_chats: unknown chats 400."""
        super().__init__(host=host, port=port)
        self.token = token
        # Telegram sends each user's client language as from.language_code.
        self.user_languages: dict[int, str] = {}
        self.bot_username = bot_username
        self.bot_first_name = bot_first_name
        self.strict_chats = strict_chats
        self._handlers: dict[str, Callable[[dict[str, Any], str], Any]] = {
            "getme": self._get_me,
            "sendmessage": self._send_message,
            "sendchataction": self._send_chat_action,
            "senddocument": self._send_document,
            "editmessagetext": self._edit_message_text,
            "editmessagereplymarkup": self._edit_message_reply_markup,
            "answercallbackquery": self._answer_callback_query,
            "deletemessage": self._delete_message,
            "getfile": self._get_file,
            "sendmessagedraft": self._send_message_draft,
            "setmycommands": self._set_my_commands,
            "getmycommands": lambda p, t: self._commands,
            "deletemycommands": self._delete_my_commands,
            "deletewebhook": self._delete_webhook,
            "getwebhookinfo": self._get_webhook_info,
            "getchat": lambda p, t: self._chat_for(p, check_blocked=False),
            "leavechat": self._leave_chat,
        }
        self._custom: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self._poll_waiters: set[asyncio.Event] = set()
        # Bumped by each getUpdates; a long poll that sees it change ends with 409 Conflict.
        self._poll_generation = 0
        self._reset_state()

    def _reset_state(self) -> None:
        with self._lock:
            self._updates: list[dict[str, Any]] = []
            self._next_update_id = 100_001
            self._confirmed_offset = 0
            self._allowed_updates: list[str] | None = None
            self._chats: dict[int, dict[str, Any]] = {}
            self._blocked: set[int] = set()
            self._left: list[int] = []  # groups the bot left (leaveChat), in order
            self._messages: dict[tuple[int, int], dict[str, Any]] = {}
            self._next_message_id: dict[int, int] = {}
            self._files: dict[str, dict[str, Any]] = {}
            self._file_paths: dict[str, bytes] = {}
            self._callback_ids: set[str] = set()
            self._commands: list[dict[str, Any]] = []
            # setMyCommands by scope (its JSON; None: the default scope)
            self._command_scopes: dict[str | None, list[dict[str, Any]]] = {}
            self._faults: list[Fault] = []
            self._disabled: set[str] = set()
            self._sent: list[dict[str, Any]] = []
            self._documents: list[dict[str, Any]] = []
            self._actions: list[dict[str, Any]] = []
            self._edits: list[dict[str, Any]] = []
            self._drafts: list[dict[str, Any]] = []
            self._callback_answers: list[dict[str, Any]] = []
            self._deleted: list[dict[str, Any]] = []
            self._requests: list[dict[str, Any]] = []
            self._changed()

    def reset(self) -> None:
        """Forget all updates, chats, files, faults and recordings."""
        self._reset_state()

    # ======================================================================= scripting API

    def add_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update (update_id assigned if missing); returns its update_id."""
        with self._lock:
            update = _jsonable(update)
            # update_id first, as Telegram orders it.
            update = {"update_id": update.pop("update_id", self._next_update_id), **update}
            self._next_update_id = max(self._next_update_id, int(update["update_id"]) + 1)
            self._updates.append(update)
            self._changed()
        self._call_in_loop(self._wake_pollers)
        return int(update["update_id"])

    def add_message(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        chat_type: str = "private",
        reply_to: int | None = None,
        username: str | None = None,
        first_name: str | None = None,
        entities: list[dict[str, Any]] | None = None,
        forward_origin: dict[str, Any] | None = None,
    ) -> int:
        """A user writes `text` in a chat (or forwards it: a MessageOrigin); returns the
        update_id."""
        extra: dict[str, Any] = {"text": text}
        if forward_origin is not None:
            extra["forward_origin"] = forward_origin
        if entities is None:
            # Telegram's server marks a leading command and every @username so clients (and
            # bots) can find them; offsets and lengths count UTF-16 code units.
            entities = auto_entities(text)
        if entities:
            extra["entities"] = entities
        return self._push_message(
            chat_id,
            user_id,
            extra,
            chat_type=chat_type,
            reply_to=reply_to,
            username=username,
            first_name=first_name,
        )

    def add_edited_message(self, chat_id: int, user_id: int, message_id: int, text: str) -> int:
        """The user edits an earlier message of theirs; returns the update_id."""
        with self._lock:
            stored = self._messages.get((chat_id, message_id))
            if stored is None:
                raise ValueError(f"no message {message_id} in chat {chat_id}")
            stored.update(text=text, edit_date=_now())
            msg = copy.deepcopy(stored)
        return self.add_update({"edited_message": msg})

    def add_callback_query(
        self, user_id: int, chat_id: int, message_id: int, data: str, **user: Any
    ) -> int:
        """The user presses an inline button; query id is ``callback_query_id(update_id)``."""
        with self._lock:
            update_id = self._next_update_id
            query_id = self.callback_query_id(update_id)
            stored = self._messages.get((chat_id, message_id))
            # A message the bot can no longer see arrives as an InaccessibleMessage (date 0).
            message = (
                copy.deepcopy(stored)
                if stored
                else {
                    "chat": self._chat(chat_id, "private", user_id),
                    "message_id": message_id,
                    "date": 0,
                }
            )
            self._callback_ids.add(query_id)
            query = {
                "id": query_id,
                "from": self._user(user_id, **user),
                "message": message,
                "chat_instance": f"{chat_id}0",  # any opaque id that is stable per chat
                "data": data,
            }
            # Still under the lock, so no other update can take this update_id meanwhile.
            return self.add_update({"update_id": update_id, "callback_query": query})

    @staticmethod
    def callback_query_id(update_id: int) -> str:
        return f"cbq{update_id}"

    def add_file(self, data: bytes, kind: str = "documents", ext: str = "bin") -> dict[str, Any]:
        """Register downloadable bytes; returns the File object (file_id, file_path, ...)."""
        with self._lock:
            n = len(self._files) + 1
            file = {
                "file_id": f"AgAD{secrets.token_urlsafe(24)}",
                "file_unique_id": f"AQAD{secrets.token_hex(6)}",
                "file_size": len(data),
                "file_path": f"{kind}/file_{n}.{ext}",
            }
            self._files[file["file_id"]] = file
            self._file_paths[file["file_path"]] = bytes(data)
            return dict(file)

    def add_photo(
        self,
        chat_id: int,
        user_id: int,
        image_bytes: bytes,
        caption: str | None = None,
        *,
        chat_type: str = "private",
        reply_to: int | None = None,
        **user: Any,
    ) -> int:
        """The user sends a photo; returns the update_id. photo[-1] is the full image."""
        w, h = image_size(image_bytes) or (800, 600)
        ext = "png" if image_bytes[:4] == b"\x89PNG" else "jpg"
        full = self.add_file(image_bytes, "photos", ext)
        # Telegram sends several sizes, smallest first; the thumbnail here serves the same bytes.
        thumb = self.add_file(image_bytes, "photos", ext)
        scale = min(1.0, 90 / max(w, h, 1))
        sizes = [
            {
                **_photo_size(thumb),
                "width": max(1, round(w * scale)),
                "height": max(1, round(h * scale)),
            },
            {**_photo_size(full), "width": w, "height": h},
        ]
        extra: dict[str, Any] = {"photo": sizes}
        if caption is not None:
            extra["caption"] = caption
        return self._push_message(
            chat_id, user_id, extra, chat_type=chat_type, reply_to=reply_to, **user
        )

    def add_document(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        file_name: str = "file.txt",
        mime_type: str = "text/plain",
        caption: str | None = None,
        *,
        chat_type: str = "private",
        **user: Any,
    ) -> int:
        """The user sends a document; returns the update_id."""
        ext = file_name.rsplit(".", 1)[-1] if "." in file_name else "bin"
        file = self.add_file(data, "documents", ext)
        doc = {**_photo_size(file), "file_name": file_name, "mime_type": mime_type}
        extra: dict[str, Any] = {"document": doc}
        if caption is not None:
            extra["caption"] = caption
        return self._push_message(chat_id, user_id, extra, chat_type=chat_type, **user)

    def add_voice(
        self,
        chat_id: int,
        user_id: int,
        data: bytes = b"OggS\x00fake",
        duration: int = 1,
        **user: Any,
    ) -> int:
        """The user sends a voice note (an unsupported kind for most bots)."""
        file = self.add_file(data, "voice", "oga")
        voice = {**_photo_size(file), "duration": duration, "mime_type": "audio/ogg"}
        return self._push_message(chat_id, user_id, {"voice": voice}, **user)

    def add_sticker(self, chat_id: int, user_id: int, emoji: str = "👍", **user: Any) -> int:
        """The user sends a sticker (an unsupported kind for most bots)."""
        file = self.add_file(b"RIFF\x00\x00\x00\x00WEBP", "stickers", "webp")
        sticker = {
            **_photo_size(file),
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
            "emoji": emoji,
        }
        return self._push_message(chat_id, user_id, {"sticker": sticker}, **user)

    def add_chat(
        self, chat_id: int, chat_type: str = "private", user_id: int | None = None
    ) -> None:
        """Make a chat known without a message (strict_chats rejects sends to unknown chats)."""
        with self._lock:
            self._chats.setdefault(chat_id, self._chat(chat_id, chat_type, user_id or chat_id))

    def add_bot_to_group(
        self, chat_id: int, by_user: int, bot_id: int, *, chat_type: str = "group"
    ) -> int:
        """`by_user` adds the bot to a group: a my_chat_member update (left → member), as
        Telegram sends it to the bot; returns the update_id."""
        with self._lock:
            chat = self._chats.setdefault(chat_id, self._chat(chat_id, chat_type, by_user))
            if chat_id in self._left:
                self._left.remove(chat_id)
            bot = {
                "id": bot_id,
                "is_bot": True,
                "first_name": self.bot_first_name,
                "username": self.bot_username,
            }
            member = {
                "chat": copy.deepcopy(chat),
                "from": self._user(by_user),
                "date": _now(),
                "old_chat_member": {"user": bot, "status": "left"},
                "new_chat_member": {"user": bot, "status": "member"},
            }
        return self.add_update({"my_chat_member": member})

    @property
    def left(self) -> list[int]:
        """Chats the bot left with leaveChat, in order."""
        with self._lock:
            return list(self._left)

    def block(self, chat_id: int) -> None:
        """The user blocks the bot: sends to this chat get 403."""
        with self._lock:
            self._blocked.add(chat_id)

    def unblock(self, chat_id: int) -> None:
        with self._lock:
            self._blocked.discard(chat_id)

    def fail_next(
        self,
        method: str,
        status: int = 500,
        description: str | None = None,
        *,
        retry_after: int | None = None,
        times: int | None = 1,
        mode: str = "error",
        delay: float = 0.0,
    ) -> None:
        """Script a failure of the next `times` calls of `method` ("*" = any method).

        mode: "error" (JSON error answer), "drop" (close the connection), "malformed" (200 with
        broken JSON), "delay" (answer normally after `delay` s), "land" (do the call, so a message
        is sent, then hold the answer for `delay` s: the window where a client that dies has sent
        a message it never learns the id of). times=None: until clear_faults().
        """
        if mode not in ("error", "drop", "malformed", "delay", "land"):
            raise ValueError(f"unknown fault mode {mode!r}")
        if description is None:
            if status == 429:
                description = f"Too Many Requests: retry after {retry_after or 1}"
                retry_after = retry_after or 1
            else:
                description = DEFAULT_DESCRIPTIONS.get(status, "Internal Server Error")
        with self._lock:
            self._faults.append(
                Fault(method.lower(), status, description, retry_after, times, mode, delay)
            )

    def drop_next(self, method: str, times: int | None = 1) -> None:
        """Close the connection instead of answering the next `times` calls of `method`."""
        self.fail_next(method, mode="drop", times=times)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def disable_method(self, name: str) -> None:
        """Answer `name` with 404 like an older server that does not know the method."""
        with self._lock:
            self._disabled.add(name.lower())

    def enable_method(self, name: str) -> None:
        with self._lock:
            self._disabled.discard(name.lower())

    def on(self, method: str, handler: Callable[[dict[str, Any]], Any]) -> None:
        """Answer `method` with handler(params) (raise TelegramError for an error answer)."""
        with self._lock:
            self._custom[method.lower()] = handler

    # ===================================================================== inspection API

    def _copy(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(items)

    @property
    def sent(self) -> list[dict[str, Any]]:
        """sendMessage calls that succeeded: chat_id, text (as sent), plain_text, parse_mode,
        entities, reply_markup, reply_to_message_id, message_id, time."""
        return self._copy(self._sent)

    @property
    def documents(self) -> list[dict[str, Any]]:
        """sendDocument calls that succeeded: chat_id, file_name, size, sha256, data (bytes of
        an upload), caption, reply_to_message_id, message_id, time."""
        return self._copy(self._documents)

    @property
    def actions(self) -> list[dict[str, Any]]:
        """sendChatAction calls: chat_id, action, time."""
        return self._copy(self._actions)

    @property
    def edits(self) -> list[dict[str, Any]]:
        """Successful edits: method, chat_id, message_id, text, plain_text, parse_mode,
        reply_markup, time."""
        return self._copy(self._edits)

    @property
    def drafts(self) -> list[dict[str, Any]]:
        """sendMessageDraft calls: chat_id, draft_id, text, plain_text, parse_mode, time."""
        return self._copy(self._drafts)

    @property
    def callback_answers(self) -> list[dict[str, Any]]:
        """answerCallbackQuery calls: callback_query_id, text, show_alert, time."""
        return self._copy(self._callback_answers)

    @property
    def deleted(self) -> list[dict[str, Any]]:
        return self._copy(self._deleted)

    @property
    def commands(self) -> list[dict[str, Any]]:
        return self._copy(self._commands)

    @property
    def command_scopes(self) -> dict[str | None, list[dict[str, Any]]]:
        with self._lock:
            return copy.deepcopy(self._command_scopes)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every API call: method, params (nested JSON decoded), status, time."""
        return self._copy(self._requests)

    @property
    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed by a getUpdates offset."""
        return self._copy(self._updates)

    @property
    def confirmed_offset(self) -> int:
        """The highest offset a getUpdates call has confirmed (all ids below are gone)."""
        with self._lock:
            return self._confirmed_offset

    def chat_history(self, chat_id: int) -> list[dict[str, Any]]:
        """The chat as the user would see it now: messages after edits and deletions."""
        with self._lock:
            items = [m for (c, _), m in self._messages.items() if c == chat_id]
            return copy.deepcopy(sorted(items, key=lambda m: m["message_id"]))

    def calls(self, method: str) -> list[dict[str, Any]]:
        """Recorded requests of one method (case-insensitive)."""
        with self._lock:
            return copy.deepcopy(
                [r for r in self._requests if r["method"].lower() == method.lower()]
            )

    def _sent_pred(
        self, count: int, chat_id: int | None
    ) -> Callable[[], list[dict[str, Any]] | None]:
        def pred() -> list[dict[str, Any]] | None:
            items = [s for s in self._sent if chat_id is None or s["chat_id"] == chat_id]
            return copy.deepcopy(items) if len(items) >= count else None

        return pred

    def wait_for_sent(
        self, count: int = 1, timeout: float = 5.0, chat_id: int | None = None
    ) -> list[dict[str, Any]]:
        """Block until at least `count` messages were sent (to chat_id); return them all."""
        return self.wait_until(self._sent_pred(count, chat_id), timeout, f"{count} sent messages")

    async def wait_for_sent_async(
        self, count: int = 1, timeout: float = 5.0, chat_id: int | None = None
    ) -> list[dict[str, Any]]:
        return await self.wait_until_async(
            self._sent_pred(count, chat_id), timeout, f"{count} sent messages"
        )

    def wait_for_requests(
        self, method: str, count: int = 1, timeout: float = 5.0
    ) -> list[dict[str, Any]]:
        """Block until `method` was called at least `count` times; return those calls."""

        def pred() -> list[dict[str, Any]] | None:
            items = [r for r in self._requests if r["method"].lower() == method.lower()]
            return copy.deepcopy(items) if len(items) >= count else None

        return self.wait_until(pred, timeout, f"{count} {method} calls")

    def wait_for_confirmed(self, update_id: int, timeout: float = 5.0) -> None:
        """Block until the client confirmed update_id (a getUpdates offset above it)."""
        self.wait_until(
            lambda: self._confirmed_offset > update_id, timeout, f"update {update_id} confirmed"
        )

    def state(self) -> dict[str, Any]:
        """Everything recorded, as JSON-ready data."""
        with self._lock:
            return copy.deepcopy(
                {
                    "sent": self._sent,
                    "actions": self._actions,
                    "edits": self._edits,
                    "drafts": self._drafts,
                    "callback_answers": self._callback_answers,
                    "deleted": self._deleted,
                    "commands": self._commands,
                    "pending_updates": self._updates,
                    "confirmed_offset": self._confirmed_offset,
                    "faults": [asdict(f) for f in self._faults],
                    "request_count": len(self._requests),
                }
            )

    # ============================================================ users, chats, messages

    def _user(
        self, user_id: int, username: str | None = None, first_name: str | None = None
    ) -> dict[str, Any]:
        return {
            "id": user_id,
            "is_bot": False,
            "first_name": first_name or f"User{user_id}",
            "username": username or f"user{user_id}",
            "language_code": "en",
        }

    def _chat(self, chat_id: int, chat_type: str, user_id: int, **user: Any) -> dict[str, Any]:
        if chat_type == "private":
            u = self._user(user_id, **user)
            return {
                "id": chat_id,
                "type": "private",
                "first_name": u["first_name"],
                "username": u["username"],
            }
        return {"id": chat_id, "type": chat_type, "title": f"Chat {chat_id}"}

    def _bot_user(self, token: str) -> dict[str, Any]:
        return {
            "id": int(token.split(":")[0]),
            "is_bot": True,
            "first_name": self.bot_first_name,
            "username": self.bot_username,
        }

    def _new_message_id(self, chat_id: int) -> int:
        # Private chats number messages per chat, shared by both sides.
        n = self._next_message_id.get(chat_id, 1)
        self._next_message_id[chat_id] = n + 1
        return n

    def _reply_copy(self, chat_id: int, message_id: int) -> dict[str, Any] | None:
        stored = self._messages.get((chat_id, message_id))
        if stored is None:
            return None
        reply = copy.deepcopy(stored)
        reply.pop("reply_to_message", None)  # Telegram never nests replies further
        return reply

    def _push_message(
        self,
        chat_id: int,
        user_id: int,
        extra: dict[str, Any],
        *,
        chat_type: str = "private",
        reply_to: int | None = None,
        username: str | None = None,
        first_name: str | None = None,
    ) -> int:
        """Store a message from a user and queue it as an update; returns the update_id."""
        with self._lock:
            chat = self._chat(chat_id, chat_type, user_id, username=username, first_name=first_name)
            self._chats[chat_id] = chat
            msg: dict[str, Any] = {
                "message_id": self._new_message_id(chat_id),
                "from": self._user(user_id, username, first_name),
                "chat": chat,
                "date": _now(),
                **extra,
            }
            if user_id in self.user_languages:
                msg["from"]["language_code"] = self.user_languages[user_id]
            if reply_to is not None:
                reply = self._reply_copy(chat_id, reply_to)
                if reply is None:
                    raise ValueError(f"no message {reply_to} in chat {chat_id} to reply to")
                msg["reply_to_message"] = reply
            self._messages[(chat_id, msg["message_id"])] = msg
            # Under the same lock, so updates are queued in message order.
            return self.add_update({"message": copy.deepcopy(msg)})

    # ==================================================================== HTTP plumbing

    def _on_loop_started(self) -> None:
        self._poll_waiters = set()

    def _on_closing(self) -> None:
        self._wake_pollers()

    def _wake_pollers(self) -> None:
        for event in list(self._poll_waiters):
            event.set()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._handle_file)
        app.router.add_route("*", "/_fake/{name}", self._handle_control)

    @staticmethod
    def _error(status: int, description: str, retry_after: int | None = None) -> web.Response:
        body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if retry_after is not None:
            body["parameters"] = {"retry_after": retry_after}
        return web.json_response(body, status=status)

    def _check_token(self, token: str) -> web.Response | None:
        if not TOKEN_RE.fullmatch(token):
            return self._error(404, "Not Found")
        if self.token is not None and token != self.token:
            return self._error(401, "Unauthorized")
        return None

    @staticmethod
    async def _read_params(request: web.Request) -> dict[str, Any]:
        """Query string, urlencoded/multipart form or JSON body; nested JSON strings decoded."""
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                body = await request.json()
                if not isinstance(body, dict):
                    raise TelegramError(400, "Bad Request: request body must be a JSON object")
                params.update(body)
            else:
                for key, value in (await request.post()).items():
                    if isinstance(value, web.FileField):
                        data = value.file.read()
                        params[key] = {
                            "filename": value.filename,
                            "size": len(data),
                            "content_type": value.content_type,
                            "data": data,
                        }
                    else:
                        params[key] = value
        for key in JSON_FIELDS & params.keys():
            if isinstance(params[key], str):
                try:
                    params[key] = json.loads(params[key])
                except ValueError:
                    raise TelegramError(
                        400, f"Bad Request: can't parse {key} JSON object"
                    ) from None
        return params

    def _take_fault(self, method: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.method in (method, "*"):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        token, method = request.match_info["token"], request.match_info["method"]
        if (denied := self._check_token(token)) is not None:
            return denied
        record: dict[str, Any] = {
            "method": method,
            "content_type": request.content_type,
            "params": {},
            "status": None,
            "time": time.time(),
        }
        with self._lock:
            self._requests.append(record)
        try:
            params = await self._read_params(request)
            record["params"] = _without_bytes(params)
        except TelegramError as e:
            record["status"] = e.status
            return self._error(e.status, e.description)
        finally:
            with self._lock:
                self._changed()

        key = method.lower()
        fault = self._take_fault(key)
        if fault is not None and fault.mode not in ("delay", "land"):
            record["status"] = fault.mode if fault.mode != "error" else fault.status
            if fault.mode == "drop":
                return self.drop_connection(request)
            if fault.mode == "malformed":
                return web.Response(
                    text='{"ok": true, "result": {"message_id', content_type="application/json"
                )
            return self._error(fault.status, fault.description, fault.retry_after)
        if fault is not None and fault.mode == "delay":
            await sleep_or_closing(self, fault.delay)

        with self._lock:
            handler = None if key in self._disabled else self._custom.get(key)
        try:
            if handler is not None:
                result = handler(params)
            elif key == "getupdates" and key not in self._disabled:
                result = await self._get_updates(params)
            elif key in self._handlers and key not in self._disabled:
                with self._lock:
                    result = self._handlers[key](params, token)
            else:
                raise TelegramError(404, "Not Found: method not found")
        except TelegramError as e:
            record["status"] = e.status
            return self._error(e.status, e.description, e.retry_after)
        finally:
            with self._lock:
                self._changed()
        if fault is not None and fault.mode == "land":
            record["status"] = "landed"
            await sleep_or_closing(self, fault.delay)
        record["status"] = 200
        return web.json_response({"ok": True, "result": result})

    async def _handle_file(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._check_token(request.match_info["token"])) is not None:
            return denied
        with self._lock:
            data = self._file_paths.get(request.match_info["path"])
        if data is None:
            return self._error(404, "Not Found")
        return web.Response(body=data, content_type="application/octet-stream")

    # ======================================================================= API methods

    def _get_me(self, p: dict[str, Any], token: str) -> dict[str, Any]:
        return {
            **self._bot_user(token),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    def _confirm(self, offset: int | None) -> None:
        if offset is None:
            return
        if offset < 0:
            # A negative offset keeps only the last -offset updates; the rest are forgotten.
            self._updates = self._updates[offset:]
            return
        self._updates = [u for u in self._updates if u["update_id"] >= offset]
        self._confirmed_offset = max(self._confirmed_offset, offset)

    def _deliverable(self, limit: int) -> list[dict[str, Any]]:
        allowed = set(self._allowed_updates or ())
        kept = []
        for update in self._updates:
            kind = next((k for k in update if k != "update_id"), "")
            wanted = kind in allowed if allowed else kind not in OPT_IN_UPDATES
            if wanted:
                kept.append(update)
        # Updates of kinds the bot did not ask for are never delivered, as on Telegram.
        self._updates = kept
        return copy.deepcopy(kept[:limit])

    async def _get_updates(self, p: dict[str, Any]) -> list[dict[str, Any]]:
        offset = _int(p, "offset")
        limit = min(max(_int(p, "limit", 100) or 100, 1), 100)
        timeout = max(_int(p, "timeout", 0) or 0, 0)
        with self._lock:
            self._poll_generation += 1
            generation = self._poll_generation
            if isinstance(p.get("allowed_updates"), list):
                self._allowed_updates = p["allowed_updates"]
            self._confirm(offset)
        self._wake_pollers()  # an older long poll now ends with 409, as on Telegram
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if generation != self._poll_generation:
                    raise TelegramError(409, DEFAULT_DESCRIPTIONS[409])
                batch = self._deliverable(limit)
            remaining = deadline - time.monotonic()
            if batch or remaining <= 0 or self._closing:
                return batch
            event = asyncio.Event()
            self._poll_waiters.add(event)
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except TimeoutError:
                pass
            finally:
                self._poll_waiters.discard(event)

    def _chat_for(self, p: dict[str, Any], check_blocked: bool = True) -> dict[str, Any]:
        raw = p.get("chat_id")
        if raw is None or raw == "":
            raise TelegramError(400, "Bad Request: chat_id is empty")
        try:
            chat_id = int(raw)
        except (TypeError, ValueError):
            raise TelegramError(400, "Bad Request: chat not found") from None
        if chat_id not in self._chats:
            if self.strict_chats:
                raise TelegramError(400, "Bad Request: chat not found")
            kind = "private" if chat_id > 0 else "supergroup"
            self._chats[chat_id] = self._chat(chat_id, kind, chat_id)
        if check_blocked and chat_id in self._blocked:
            raise TelegramError(403, "Forbidden: bot was blocked by the user")
        if check_blocked and chat_id in self._left:
            raise TelegramError(403, f"Forbidden: bot is not a member of the {_kind(chat_id)}")
        return self._chats[chat_id]

    @staticmethod
    def _format(p: dict[str, Any]) -> tuple[str, list[dict[str, Any]] | None]:
        """Plain text and entities as Telegram would store them; 400 on bad HTML or length."""
        text = p.get("text")
        if not isinstance(text, str) or not text.strip():
            raise TelegramError(400, "Bad Request: message text is empty")
        entities = p.get("entities") if isinstance(p.get("entities"), list) else None
        if str(p.get("parse_mode") or "").lower() == "html":
            try:
                text, entities = parse_html(text)
            except HtmlError as e:
                raise TelegramError(400, f"Bad Request: can't parse entities: {e}") from None
            if not text.strip():
                raise TelegramError(400, "Bad Request: message text is empty")
        # Telegram counts characters after entity parsing.
        if len(text) > MAX_TEXT:
            raise TelegramError(400, "Bad Request: message is too long")
        return text, entities or None

    @staticmethod
    def _inline_markup(p: dict[str, Any]) -> dict[str, Any] | None:
        markup = p.get("reply_markup")
        return markup if isinstance(markup, dict) and "inline_keyboard" in markup else None

    def _new_message(
        self, p: dict[str, Any], chat: dict[str, Any], token: str, content: dict[str, Any]
    ) -> tuple[dict[str, Any], int | None]:
        """A message from the bot with `content`, replying where reply_parameters ask."""
        reply_to = _int(p, "reply_to_message_id")
        if isinstance(p.get("reply_parameters"), dict):
            reply_to = p["reply_parameters"].get("message_id")
        msg: dict[str, Any] = {
            "message_id": self._new_message_id(chat["id"]),
            "from": self._bot_user(token),
            "chat": chat,
            "date": _now(),
            **content,
        }
        if reply_to is not None:
            reply = self._reply_copy(chat["id"], reply_to)
            allow = isinstance(p.get("reply_parameters"), dict) and p["reply_parameters"].get(
                "allow_sending_without_reply"
            )
            if reply is None and not allow:
                raise TelegramError(400, "Bad Request: message to be replied not found")
            if reply is not None:
                msg["reply_to_message"] = reply
        self._messages[(chat["id"], msg["message_id"])] = msg
        return msg, reply_to

    def _send_message(self, p: dict[str, Any], token: str) -> dict[str, Any]:
        chat = self._chat_for(p)
        text, entities = self._format(p)
        content: dict[str, Any] = {"text": text}
        if entities:
            content["entities"] = entities
        if (markup := self._inline_markup(p)) is not None:
            content["reply_markup"] = markup
        msg, reply_to = self._new_message(p, chat, token, content)
        self._sent.append(
            {
                "chat_id": chat["id"],
                "text": p.get("text"),
                "plain_text": text,
                "parse_mode": p.get("parse_mode"),
                "entities": entities,
                "reply_markup": p.get("reply_markup"),
                "reply_to_message_id": reply_to,
                "link_preview_options": p.get("link_preview_options"),
                "message_id": msg["message_id"],
                "time": time.time(),
            }
        )
        return copy.deepcopy(msg)

    def _send_document(self, p: dict[str, Any], token: str) -> dict[str, Any]:
        """An upload (multipart), or an existing file_id; Telegram's limits for bots apply."""
        chat = self._chat_for(p)
        doc = p.get("document")
        if isinstance(doc, str) and doc.startswith("attach://"):  # aiogram names the part
            doc = p.get(doc[len("attach://") :])
            if not isinstance(doc, dict):
                raise TelegramError(400, "Bad Request: can't find the attached file")
        if isinstance(doc, dict):  # uploaded as a multipart file
            data = doc["data"]
            if not data:
                raise TelegramError(400, "Bad Request: file must be non-empty")
            if len(data) > MAX_UPLOAD:
                raise TelegramError(413, "Request Entity Too Large")
            ext = doc["filename"].rsplit(".", 1)[-1] if "." in doc["filename"] else "bin"
            file = self.add_file(data, "documents", ext)  # the lock is re-entrant
            name, mime = doc["filename"], doc.get("content_type") or "application/octet-stream"
        elif isinstance(doc, str) and doc in self._files:
            file = self._files[doc]
            data = self._file_paths[file["file_path"]]
            name, mime = file["file_path"].rsplit("/", 1)[-1], "application/octet-stream"
        else:
            raise TelegramError(400, "Bad Request: there is no document in the request")
        caption = str(p.get("caption") or "")
        if len(caption) > 1024:
            raise TelegramError(400, "Bad Request: message caption is too long")
        content: dict[str, Any] = {
            "document": {**_photo_size(file), "file_name": name, "mime_type": mime}
        }
        if caption:
            content["caption"] = caption
        msg, reply_to = self._new_message(p, chat, token, content)
        self._documents.append(
            {
                "chat_id": chat["id"],
                "file_name": name,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "data": data,
                "caption": caption,
                "reply_to_message_id": reply_to,
                "message_id": msg["message_id"],
                "time": time.time(),
            }
        )
        return copy.deepcopy(msg)

    def _leave_chat(self, p: dict[str, Any], token: str) -> bool:
        chat = self._chat_for(p, check_blocked=False)
        if chat["type"] == "private":
            raise TelegramError(
                400, "Bad Request: chat member status can't be changed in private chats"
            )
        if chat["id"] in self._left:
            raise TelegramError(403, f"Forbidden: bot is not a member of the {_kind(chat['id'])}")
        self._left.append(chat["id"])
        return True

    def _send_chat_action(self, p: dict[str, Any], token: str) -> bool:
        chat = self._chat_for(p)
        action = p.get("action")
        if action not in CHAT_ACTIONS:
            raise TelegramError(400, "Bad Request: wrong parameter action in request")
        self._actions.append({"chat_id": chat["id"], "action": action, "time": time.time()})
        return True

    def _editable(self, p: dict[str, Any], token: str) -> dict[str, Any]:
        chat = self._chat_for(p)
        message_id = _int(p, "message_id")
        msg = self._messages.get((chat["id"], message_id or 0))
        if msg is None:
            raise TelegramError(400, "Bad Request: message to edit not found")
        if not msg["from"].get("is_bot"):
            raise TelegramError(400, "Bad Request: message can't be edited")
        return msg

    def _record_edit(self, method: str, msg: dict[str, Any], p: dict[str, Any]) -> None:
        self._edits.append(
            {
                "method": method,
                "chat_id": msg["chat"]["id"],
                "message_id": msg["message_id"],
                "text": p.get("text"),
                "plain_text": msg.get("text"),
                "parse_mode": p.get("parse_mode"),
                "reply_markup": p.get("reply_markup"),
                "time": time.time(),
            }
        )

    def _edit_message_text(self, p: dict[str, Any], token: str) -> dict[str, Any] | bool:
        if p.get("inline_message_id"):
            self._format(p)
            self._record_edit("editMessageText", {"chat": {"id": None}, "message_id": None}, p)
            return True
        msg = self._editable(p, token)
        text, entities = self._format(p)
        # Editing text without reply_markup removes the inline keyboard, as on Telegram.
        markup = self._inline_markup(p)
        if (text, entities, markup) == (
            msg.get("text"),
            msg.get("entities"),
            msg.get("reply_markup"),
        ):
            raise TelegramError(400, NOT_MODIFIED)
        msg.update(text=text, edit_date=_now())
        for key, value in (("entities", entities), ("reply_markup", markup)):
            if value:
                msg[key] = value
            else:
                msg.pop(key, None)
        self._record_edit("editMessageText", msg, p)
        return copy.deepcopy(msg)

    def _edit_message_reply_markup(self, p: dict[str, Any], token: str) -> dict[str, Any] | bool:
        msg = self._editable(p, token)
        markup = self._inline_markup(p)
        if markup == msg.get("reply_markup"):
            raise TelegramError(400, NOT_MODIFIED)
        if markup:
            msg["reply_markup"] = markup
        else:
            msg.pop("reply_markup", None)
        msg["edit_date"] = _now()
        self._record_edit("editMessageReplyMarkup", msg, p)
        return copy.deepcopy(msg)

    def _delete_message(self, p: dict[str, Any], token: str) -> bool:
        chat = self._chat_for(p, check_blocked=False)
        message_id = _int(p, "message_id") or 0
        if self._messages.pop((chat["id"], message_id), None) is None:
            raise TelegramError(400, "Bad Request: message to delete not found")
        self._deleted.append({"chat_id": chat["id"], "message_id": message_id, "time": time.time()})
        return True

    def _answer_callback_query(self, p: dict[str, Any], token: str) -> bool:
        query_id = p.get("callback_query_id")
        if query_id not in self._callback_ids:
            raise TelegramError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        self._callback_answers.append(
            {
                "callback_query_id": query_id,
                "text": p.get("text"),
                "show_alert": _bool(p, "show_alert"),
                "url": p.get("url"),
                "time": time.time(),
            }
        )
        return True

    def _get_file(self, p: dict[str, Any], token: str) -> dict[str, Any]:
        file = self._files.get(str(p.get("file_id") or ""))
        if file is None:
            raise TelegramError(400, "Bad Request: invalid file_id")
        if file["file_size"] > MAX_DOWNLOAD:
            raise TelegramError(400, "Bad Request: file is too big")
        return dict(file)

    def _send_message_draft(self, p: dict[str, Any], token: str) -> bool:
        chat = self._chat_for(p)
        if chat["type"] != "private":
            raise TelegramError(
                400, "Bad Request: message drafts can be sent only to private chats"
            )
        draft_id = _int(p, "draft_id") or 0
        if draft_id == 0:
            raise TelegramError(400, "Bad Request: draft_id must be non-zero")
        # An empty text is allowed: it shows a "Thinking…" placeholder.
        text, _ = self._format(p) if p.get("text") else ("", None)
        self._drafts.append(
            {
                "chat_id": chat["id"],
                "draft_id": draft_id,
                "text": p.get("text"),
                "plain_text": text,
                "parse_mode": p.get("parse_mode"),
                "time": time.time(),
            }
        )
        return True

    def _set_my_commands(self, p: dict[str, Any], token: str) -> bool:
        commands = p.get("commands")
        if not isinstance(commands, list):
            raise TelegramError(400, 'Bad Request: parameter "commands" is required')
        scope = p.get("scope")
        if scope is not None and not isinstance(scope, str):
            scope = json.dumps(scope, sort_keys=True)
        self._command_scopes[scope] = commands  # None: the default scope
        if scope is None:
            self._commands = commands
        return True

    def _delete_my_commands(self, p: dict[str, Any], token: str) -> bool:
        self._commands = []
        return True

    def _delete_webhook(self, p: dict[str, Any], token: str) -> bool:
        if _bool(p, "drop_pending_updates"):
            self._updates = []
        return True

    def _get_webhook_info(self, p: dict[str, Any], token: str) -> dict[str, Any]:
        return {
            "url": "",
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates),
        }

    # ================================================================== /_fake control

    async def _handle_control(self, request: web.Request) -> web.StreamResponse:
        """JSON control endpoints so a test can drive a fake running in another process."""
        name = request.match_info["name"]
        body: dict[str, Any] = {}
        if request.method == "POST" and request.can_read_body:
            body = await request.json()
        query = dict(request.query)
        lists = {
            "sent": lambda: self.sent,
            "documents": lambda: [_without_bytes(d) for d in self.documents],
            "actions": lambda: self.actions,
            "edits": lambda: self.edits,
            "drafts": lambda: self.drafts,
            "callback_answers": lambda: self.callback_answers,
            "deleted": lambda: self.deleted,
            "commands": lambda: self.commands,
            "requests": lambda: self.calls(query["method"]) if "method" in query else self.requests,
            "pending_updates": lambda: self.pending_updates,
            "state": self.state,
        }
        try:
            if request.method == "GET" and name in lists:
                return web.json_response(lists[name]())
            if name == "wait_sent":
                count = int(query.get("count", body.get("count", 1)))
                timeout = float(query.get("timeout", body.get("timeout", 5)))
                return web.json_response(await self.wait_for_sent_async(count, timeout))
            if name == "history":
                return web.json_response(self.chat_history(int(query["chat_id"])))
            result = self._control_post(name, body)
        except TimeoutError as e:
            return web.json_response({"error": str(e)}, status=408)
        except (KeyError, TypeError, ValueError) as e:
            return web.json_response({"error": f"{type(e).__name__}: {e}"}, status=400)
        if result is _UNKNOWN:
            return web.json_response({"error": f"unknown control endpoint {name}"}, status=404)
        return web.json_response({"ok": True, "result": result})

    def _control_post(self, name: str, body: dict[str, Any]) -> Any:
        def b64(key: str) -> bytes:
            return base64.b64decode(body.pop(key))

        if name == "message":
            return {"update_id": self.add_message(**body)}
        if name == "update":
            return {"update_id": self.add_update(body)}
        if name == "callback":
            update_id = self.add_callback_query(**body)
            return {"update_id": update_id, "callback_query_id": self.callback_query_id(update_id)}
        if name == "photo":
            return {"update_id": self.add_photo(image_bytes=b64("image_b64"), **body)}
        if name == "document":
            return {"update_id": self.add_document(data=b64("data_b64"), **body)}
        if name == "edited":
            return {"update_id": self.add_edited_message(**body)}
        if name == "voice":
            return {"update_id": self.add_voice(**body)}
        if name == "sticker":
            return {"update_id": self.add_sticker(**body)}
        if name == "chat":
            return self.add_chat(**body)
        if name == "fail":
            return self.fail_next(**body)
        if name == "clear_faults":
            return self.clear_faults()
        if name == "disable":
            return self.disable_method(body["method"])
        if name == "enable":
            return self.enable_method(body["method"])
        if name == "block":
            return self.block(body["chat_id"])
        if name == "unblock":
            return self.unblock(body["chat_id"])
        if name == "reset":
            return self.reset()
        return _UNKNOWN

    @classmethod
    def add_cli_arguments(cls, parser: Any) -> None:
        parser.add_argument("--token", default=None, help="accept only this bot token")
        parser.add_argument(
            "--lenient-chats", action="store_true", help="accept sends to chats never seen"
        )

    @classmethod
    def cli_kwargs(cls, args: Any) -> dict[str, Any]:
        return {"token": args.token, "strict_chats": not args.lenient_chats}


_UNKNOWN = object()


def _photo_size(file: dict[str, Any]) -> dict[str, Any]:
    return {k: file[k] for k in ("file_id", "file_unique_id", "file_size")}


if __name__ == "__main__":
    FakeTelegram.main()
