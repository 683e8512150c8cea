"""What one Matrix timeline event is: a turn, an answer to a card, a refusal, or nothing.

Works on the JSON the server sent and on what intake knows of the room (its members, whether
it is encrypted); ids are already local integers (matrix/ids.py), so what leaves here is the
same `TurnInput` a Telegram message becomes.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel

from agentd.chat.inputs import MAX_TEXT_CHARS, MediaRef, ReplyContext, TurnInput

TEXT_TYPES = ("m.text", "m.notice", "m.emote")
# A card's choices, as the reactions that stand for them (output.py puts them on the card).
KEYCAPS = ["1️⃣", "2️⃣", "3️⃣", "4️⃣", "5️⃣", "6️⃣", "7️⃣", "8️⃣", "9️⃣"]
MEDIA_KINDS: dict[str, Literal["voice", "audio", "document"]] = {
    "m.audio": "audio",
    "m.file": "document",
}


class MatrixIdentity(BaseModel):
    """Who the bot is on Matrix and whom it serves."""

    bot: str
    owner: str = ""
    owner_id: int | None = None  # the owner's agentd user id ([access] owner_id)
    allowed: frozenset[str] = frozenset()
    allow_groups: bool = False
    served_users: frozenset[int] = frozenset()  # agentd users served by configuration

    def served(self, user: str) -> bool:
        return user == self.owner or user in self.allowed


class Room(BaseModel):
    room_id: str
    members: frozenset[str] = frozenset()  # joined or invited
    encrypted: bool = False

    def private_with(self, bot: str, user: str) -> bool:
        """A direct room: only the bot and this person in it."""
        return self.members == frozenset({bot, user})

    def direct(self, bot: str) -> bool:
        """Only the bot and one person in it (joined or invited)."""
        return len(self.members) == 2 and bot in self.members


class EventDecision(BaseModel):
    action: Literal["turn", "edit", "reaction", "reject", "ignore", "leave"]
    kind: str
    reason: str = ""
    turn: TurnInput | None = None
    # An edit's original event, and the edit as the message it makes (`m.new_content`).
    original: str = ""
    shown: dict[str, Any] | None = None


def edit_of(event: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(the original event id, the event as its edit shows it) for an `m.replace`; None for
    any other event. An edit with no usable target or new content shows as ("", {})."""
    content = event.get("content") if isinstance(event.get("content"), dict) else {}
    relates = content.get("m.relates_to")
    if not isinstance(relates, dict) or relates.get("rel_type") != "m.replace":
        return None
    target, new = relates.get("event_id"), content.get("m.new_content")
    if not isinstance(target, str) or not target or not isinstance(new, dict):
        return "", {}
    return target, {**event, "content": new}


def addressed(event: dict[str, Any], bot: str, replied_to_bot: bool) -> bool:
    """In a group, only a message meant for the bot is answered: a mention, or a reply.

    A message with `m.mentions` (the spec's intentional mentions, v1.7) mentions whom its
    sender's client listed there, and no one else: its body is not searched, as the push
    rules no longer search it then. One without is searched for the bot's id (or @localpart)
    in the sender's own words: a reply's fallback quote (`> <@someone> …`, the message it
    answers) is cut off first, so replying to a message that named the bot is no mention."""
    content = event.get("content") if isinstance(event.get("content"), dict) else {}
    mentions = content.get("m.mentions")
    if isinstance(mentions, dict):
        users = mentions.get("user_ids")
        return (isinstance(users, list) and bot in users) or replied_to_bot
    return names_bot(reply_parts(content)[2], bot) or replied_to_bot


def names_bot(body: str, bot: str) -> bool:
    """Whether `body` names the bot as a whole name: its id, or `@localpart` with no server
    (as people type it); `@bot` inside `@bottle`, `@bot:other.org` or `x@bot` is someone else.
    A sentence's full stop may follow either; a dot that goes on into a word may not."""
    localpart = re.escape(bot.split(":")[0].lstrip("@"))
    server = r":[\w\[]"  # a colon that goes on into a server name (a colon then a space does not)
    bare = rf"@{localpart}(?![\w=/+-]|{server})"
    whole = rf"(?<![\w@.+=/-])(?:{re.escape(bot)}(?![\w-]|{server})|{bare})(?!\.\w)"
    return re.search(whole, body) is not None


def reply_parts(content: dict[str, Any]) -> tuple[str, str, str]:
    """(the event a message replies to, the text it quotes, the sender's own text). A reply's
    body may begin with the message it answers as `> ` lines and a blank line (the spec's
    fallback, which many clients still send): words the sender did not write, kept apart as
    the quote. ("", "", body) for a message that replies to nothing."""
    body = content.get("body") if isinstance(content.get("body"), str) else ""
    relates = content.get("m.relates_to")
    reply = relates.get("m.in_reply_to") if isinstance(relates, dict) else None
    target = reply.get("event_id") if isinstance(reply, dict) else None
    if not isinstance(target, str) or not target:
        return "", "", body
    lines = body.split("\n")
    # Counted, not popped one by one from the front: a body of many `>` lines (a hostile
    # server's event is not bounded by the spec's 64 KiB) is read in linear time.
    cut = next((n for n, line in enumerate(lines) if not line.startswith(">")), len(lines))
    if not cut:
        return target, "", body
    quoted = [line[1:].removeprefix(" ") for line in lines[:cut]]
    if cut < len(lines) and not lines[cut].strip():
        cut += 1
    return target, "\n".join(quoted), "\n".join(lines[cut:])


def turn_of(
    event: dict[str, Any],
    *,
    local_event: int,
    chat_id: int,
    user_id: int,
    private: bool,
    reply_to: ReplyContext | None = None,
) -> TurnInput:
    """The turn a message starts; an unknown message type is `unsupported` (answered so).
    `reply_to`: the message it answers, its quote cut from the body (`reply_parts`)."""
    content = event.get("content") if isinstance(event.get("content"), dict) else {}
    msgtype = str(content.get("msgtype") or "")[:100]
    body = reply_parts(content)[2]
    text = body[:MAX_TEXT_CHARS]
    url = content.get("url") if isinstance(content.get("url"), str) else None
    info = content.get("info") if isinstance(content.get("info"), dict) else {}
    fields: dict[str, Any] = {
        "origin": "chat",
        "update_id": local_event,
        "message_id": local_event,
        "chat_id": chat_id,
        "user_id": user_id,
        "date": float(event.get("origin_server_ts") or 0) / 1000,
        "chat_kind": "private" if private else "group",
        "reply_to": reply_to,
    }
    if msgtype in TEXT_TYPES:
        return TurnInput(kind="text", text=text, **fields)
    # A file's body is its caption when a `filename` is given, else the file's name.
    filename = content.get("filename") if isinstance(content.get("filename"), str) else None
    caption = text if filename and text != filename else ""
    if msgtype == "m.image" and url:
        return TurnInput(kind="photo", photo_file_id=url, text=caption, **fields)
    if msgtype in MEDIA_KINDS and url:
        media = MediaRef(
            kind=MEDIA_KINDS[msgtype],
            file_id=url,
            file_name=str(content.get("filename") or text or "")[:200],
            mime_type=str(info.get("mimetype") or "")[:100],
            file_size=int(info.get("size") or 0) if isinstance(info.get("size"), int) else 0,
        )
        kind: Literal["voice", "document"] = "document" if msgtype == "m.file" else "voice"
        return TurnInput(kind=kind, media=media, text=caption, **fields)
    return TurnInput(kind="unsupported", unsupported_kind=msgtype or "message", **fields)


def classify_event(
    event: dict[str, Any], room: Room, me: MatrixIdentity, *, replied_to_bot: bool
) -> EventDecision:
    """Decide what a timeline event asks for (its turn is built by intake, which has ids)."""
    etype, sender = str(event.get("type") or ""), str(event.get("sender") or "")
    if sender == me.bot:
        return EventDecision(action="ignore", kind=etype, reason="the bot's own event")
    # An encrypted event in a room whose state says nothing of encryption is only the
    # sender's doing: a served person's client encrypts (so the room is, for them), while a
    # stranger's must not make the bot leave a room the owner shares with them.
    encrypted_by_one = etype == "m.room.encrypted" and me.served(sender)
    if room.encrypted or encrypted_by_one:
        return EventDecision(action="leave", kind=etype, reason="encrypted room")
    if etype == "m.room.encrypted":
        return EventDecision(action="reject", kind=etype, reason="user not in allowlist")
    if etype not in ("m.room.message", "m.reaction"):
        return EventDecision(action="ignore", kind=etype, reason="event kind not served")
    if not me.served(sender):
        return EventDecision(action="reject", kind=etype, reason="user not in allowlist")
    if etype == "m.reaction":
        return EventDecision(action="reaction", kind=etype)
    action: Literal["turn", "edit"] = "turn"
    original, shown = "", event
    edit = edit_of(event)
    if edit is not None:  # judged by what it makes the message say (a mention added, say)
        original, shown = edit
        if not original:
            return EventDecision(action="ignore", kind=etype, reason="an edit with no new content")
        action = "edit"
    decided = EventDecision(action=action, kind=etype, original=original, shown=shown)
    if room.private_with(me.bot, sender):
        return decided
    if not me.allow_groups:
        return EventDecision(action="leave", kind=etype, reason="group chats are disabled")
    if not addressed(shown, me.bot, replied_to_bot):
        return EventDecision(action="ignore", kind=etype, reason="not addressed to the bot")
    return decided
