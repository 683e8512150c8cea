"""Persist-then-advance: a sync's events, the work they start and its `next_batch` token are
committed in one transaction, and only then is the token used for the next /sync.

A kill -9 before the commit re-reads the same batch (nothing lost); after it, the token has
moved with the work (nothing started twice). Each event that starts a turn does so under an
instance id derived from its event id, so even a batch the server sent twice starts it once.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from agentd.access import accounts, pairing
from agentd.agent.busy import plan_busy
from agentd.agent.edits import plan_edit
from agentd.chat import reach
from agentd.chat.busy import BusyMode
from agentd.chat.inputs import MAX_TEXT_CHARS, CallbackPress, ReplyContext, TurnInput
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.chat.notice import NOTICE_WORKFLOW, NoticeInput
from agentd.durable import Engine
from agentd.ledger import audit
from agentd.matrix import ids, rooms
from agentd.matrix.classify import (
    KEYCAPS,
    EventDecision,
    MatrixIdentity,
    Room,
    classify_event,
    edit_of,
    reply_parts,
    turn_of,
)
from agentd.matrix.gaps import Gap, joins
from agentd.memory import history

SINCE_KEY = "matrix_since"
# The account `[matrix] owner` linked to the owner: once the configuration names another (or
# none), that link goes, as a Telegram owner_id taken out of the file is no longer served.
OWNER_KEY = "matrix_owner"
EDIT_KIND = "m.replace"  # matrix_events.kind of an edit, so no edit is ever taken as an original
CHANNEL = "matrix"  # the channel's name (matrix/channel.py), as rows that name it say

CallbackHandler = Callable[[Any, CallbackPress], str]
CommandHook = Callable[[TurnInput, Any], tuple[str, BaseModel, str] | None]


class SyncResult(BaseModel):
    keys: set[str] = Field(default_factory=set)
    accepted: int = 0
    duplicates: int = 0
    presses: int = 0  # reactions taken as a card's answer: the turns waiting for one wake
    cancels: list[str] = Field(default_factory=list)  # turns a message interrupted: stop them
    ignored: list[tuple[str, str, str]] = Field(default_factory=list)  # room, sender, reason


def _obj(value: Any) -> dict[str, Any]:
    """A JSON object from the server, or an empty one for anything else (never trusted)."""
    return value if isinstance(value, dict) else {}


def _events(value: Any) -> list[Any]:
    events = _obj(value).get("events")
    return events if isinstance(events, list) else []


def instance_id_of(event_id: str) -> str:
    """A turn's instance id from its event id (bounded length, any characters in)."""
    return "mx-" + hashlib.sha256(event_id.encode()).hexdigest()[:32]


def next_batch(response: dict[str, Any]) -> str:
    """The token a sync answer moves to; a server that sent none is not followed blindly."""
    token = response.get("next_batch")
    if not isinstance(token, str) or not token or len(token) > 1000:
        raise ValueError("the homeserver's sync answer has no usable next_batch")
    return token


def load_since(conn: Any) -> str | None:
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (SINCE_KEY,)).fetchone()
    return str(row[0]) if row else None


def _room(conn: Any, room_id: str) -> Room:
    row = conn.execute(
        "SELECT members, encrypted FROM matrix_rooms WHERE room_id = ?", (room_id,)
    ).fetchone()
    if row is None:
        return Room(room_id=room_id)
    return Room(room_id=room_id, members=frozenset(json.loads(row[0])), encrypted=bool(row[1]))


def _save_room(conn: Any, room: Room, state: str) -> None:
    conn.execute(
        "INSERT INTO matrix_rooms (room_id, members, encrypted, state) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (room_id) DO UPDATE SET members = excluded.members, "
        "encrypted = excluded.encrypted, state = excluded.state",
        (room.room_id, json.dumps(sorted(room.members)), int(room.encrypted), state),
    )


def apply_state(room: Room, events: list[Any]) -> Room:
    """The room after its state events (membership, encryption), in order."""
    members, encrypted = set(room.members), room.encrypted
    for event in events:
        if not isinstance(event, dict):
            continue
        etype, key = event.get("type"), event.get("state_key")
        if etype == "m.room.encryption":
            encrypted = True  # once on, a room's encryption can never be turned off
        elif etype == "m.room.member" and isinstance(key, str):
            membership = _obj(event.get("content")).get("membership")
            if membership in ("join", "invite"):
                members.add(key)
            else:
                members.discard(key)
    return Room(room_id=room.room_id, members=frozenset(members), encrypted=encrypted)


def _start_room_action(
    conn: Any, engine: Engine, room_id: str, action: str, reason: str, by: str, result: SyncResult
) -> bool:
    """Start a join or leave; False while one of the room's is still under way."""
    if rooms.under_way(conn, room_id):
        return False
    inp = rooms.RoomInput(room_id=room_id, action=action, reason=reason, by=by)  # type: ignore[arg-type]
    key = rooms.room_key(room_id)
    # Named by the sync that decided it (the token it was asked since): the same answer read
    # again after a crash is the same decision, while a new invite after a leave comes in a
    # later sync and is a decision of its own.
    since = conn.execute("SELECT value FROM kv WHERE key = ?", (SINCE_KEY,)).fetchone()
    digest = hashlib.sha256(f"{room_id}:{action}:{since and since[0]}".encode()).hexdigest()[:24]
    instance_id = f"mx-room-{digest}"
    engine.prepare_start(conn, rooms.ROOM_WORKFLOW, inp, instance_id=instance_id, key=key)
    result.keys.add(key)
    return True


def _invite_of(events: list[Any], bot: str) -> dict[str, Any]:
    """The bot's own invite event among a room's invite state (empty if none)."""
    return next(
        (
            e
            for e in events
            if isinstance(e, dict)
            and e.get("type") == "m.room.member"
            and e.get("state_key") == bot
        ),
        {},
    )


def _invites(
    conn: Any, invited: dict[str, Any], me: MatrixIdentity, engine: Engine, result: SyncResult
) -> None:
    """Join a served person's room; refuse an encrypted one; a stranger's invite costs nothing:
    never joined, never answered, nothing stored but a log line. The one exception: while a
    pairing code waits to be redeemed (`agentd pair`), a direct-chat invite is joined, so its
    sender can send `/start CODE` there (anything else they write is still refused)."""
    pending = pairing.pending(conn, time.time())
    for room_id, data in invited.items():
        events = _events(_obj(data).get("invite_state"))
        invite = _invite_of(events, me.bot)
        inviter = str(invite.get("sender") or "")
        direct = _obj(invite.get("content")).get("is_direct") is True
        if not me.served(inviter) and not (pending and direct and inviter):
            result.ignored.append((room_id, inviter, "invite from someone not served"))
            continue
        room = apply_state(Room(room_id=room_id), events)
        if room.encrypted:
            _start_room_action(
                conn, engine, room_id, "leave", rooms.ENCRYPTED_REASON, inviter, result
            )
        else:
            _save_room(conn, room, "invited")
            if not me.served(inviter):
                rooms.note_pairing_room(conn, room_id, inviter, time.time())
            _start_room_action(conn, engine, room_id, "join", "", inviter, result)


def _leave_pairing_rooms(conn: Any, me: MatrixIdentity, engine: Engine, result: SyncResult) -> None:
    """Leave, without a word (as Telegram answers a stranger's bad code with nothing), each
    room joined for a pairing code that failed there or can no longer come."""
    waits = pairing.pending(conn, time.time())
    for room_id in rooms.pairing_rooms_to_leave(conn, waits, me.served):
        if _start_room_action(conn, engine, room_id, "leave", "", me.bot, result):
            rooms.forget_pairing_room(conn, room_id)


def with_accounts(conn: Any, me: MatrixIdentity) -> MatrixIdentity:
    """`me` serving also each Matrix account paired, or linked to a served user
    (`access.accounts.served_accounts`), as Telegram serves them."""
    served = accounts.served_accounts(conn, me.served_users | pairing.paired_ids(conn))
    linked = {mx for n in served if (mx := ids.mxid_of(conn, "user", n)) is not None}
    return me.model_copy(update={"allowed": me.allowed | linked}) if linked else me


def persist_sync(
    conn: Any,
    response: dict[str, Any],
    me: MatrixIdentity,
    engine: Engine,
    on_callback: CallbackHandler,
    on_command: CommandHook,
    *,
    first: bool,
    busy: BusyMode = "queue",
    gaps: dict[str, Gap] | None = None,
) -> SyncResult:
    """Record one /sync answer and start what it asks for, then store its `next_batch`.

    `first`: the answer to a sync with no token, which holds the rooms' past; it is taken as
    state only (the bot answers nothing written before it first started). `busy` says what a
    message does while a turn of its room works (chat/busy.py). `gaps`: per room, what its
    cut timeline left out (matrix/gaps.py), taken before the timeline's events."""
    result = SyncResult()
    settle_owner(conn, me)
    me = with_accounts(conn, me)
    rooms_data = _obj(response.get("rooms"))
    _invites(conn, _obj(rooms_data.get("invite")), me, engine, result)
    for room_id, data in _obj(rooms_data.get("join")).items():
        data = _obj(data)
        gap = (gaps or {}).get(room_id) or Gap()
        # The sync's `state` is the room's state where its timeline starts, so after the gap:
        # applied between the two (at None), each event is classified in the room as it was.
        events = [*gap.events, None, *_events(data.get("timeline"))]
        room = _room(conn, room_id)
        # Written before the bot joined (the room's past, handed over with the join): taken as
        # state only, as the first sync is; the bot answers what is said to it once it is in.
        past = first or any(joins(event, me.bot) for event in events)
        for event in events:
            if event is None:
                room = apply_state(room, _events(data.get("state")))
            if not isinstance(event, dict):
                continue
            room = apply_state(room, [event] if "state_key" in event else [])
            if joins(event, me.bot):
                past = first
            elif not past:
                me = _take_event(
                    conn, event, room, me, engine, on_callback, on_command, result, busy
                )
        _save_room(conn, room, "joined")
        chat_id = ids.local_id(conn, "room", room_id)  # from the join on, so it can be named
        if not room.direct(me.bot):
            reach.forget_chat(conn, CHANNEL, chat_id)
        if not gap.complete:
            _tell_of_gap(conn, room, len(events) - 1, me, engine, result)
    for room_id in _obj(rooms_data.get("leave")):
        conn.execute("UPDATE matrix_rooms SET state = 'left' WHERE room_id = ?", (room_id,))
    _leave_pairing_rooms(conn, me, engine, result)
    take_early(conn, me, on_callback, result)
    _set_kv(conn, SINCE_KEY, next_batch(response))
    return result


def taken_events(conn: Any, event_ids: list[str]) -> set[str]:
    """Which of these events intake already recorded (where paging back a gap stops)."""
    found: set[str] = set()
    for start in range(0, len(event_ids), 500):  # under SQLite's bound-parameter limit
        part = event_ids[start : start + 500]
        marks = ",".join("?" * len(part))
        rows = conn.execute(f"SELECT event_id FROM matrix_events WHERE event_id IN ({marks})", part)
        found.update(str(row[0]) for row in rows)
    return found


def _tell_of_gap(
    conn: Any, room: Room, read: int, me: MatrixIdentity, engine: Engine, result: SyncResult
) -> None:
    """Older messages of this room than the `read` events synced and paged back are left
    unread: recorded, and the owner told in words, rather than lost without a word."""
    since = load_since(conn)
    digest = hashlib.sha256(f"{room.room_id}:{since}".encode()).hexdigest()[:24]
    instance_id = f"mx-gap-{digest}"  # this sync's gap: read again after a crash, told once
    audit.record(
        conn,
        "matrix_gap",
        detail={"room": room.room_id, "read": read},
        source_key=instance_id,
    )
    if me.owner_id is None:
        return
    where = "our direct room" if room.private_with(me.bot, me.owner) else f"room {room.room_id}"
    text = (
        f"More was written in {where} on Matrix than I could read back at once: I read the "
        f"newest {read} events there, and older messages were not read. Send again anything "
        "that still needs an answer."
    )
    inp = NoticeInput(user_id=me.owner_id, text=text)
    engine.prepare_start(conn, NOTICE_WORKFLOW, inp, instance_id=instance_id, key=instance_id)
    result.keys.add(instance_id)


def _replied_to_bot(conn: Any, event: dict[str, Any], room: Room) -> bool:
    """A reply to one of the bot's messages in this room (an event agentd sent here)."""
    relates = _obj(event.get("content")).get("m.relates_to")
    reply = relates.get("m.in_reply_to") if isinstance(relates, dict) else None
    target = reply.get("event_id") if isinstance(reply, dict) else None
    return isinstance(target, str) and ids.sent_by_bot(conn, target, room.room_id)


def _reply_context(
    conn: Any, event: dict[str, Any], room: Room, private: bool
) -> ReplyContext | None:
    """The message `event` answers, as a Telegram reply says it: its local id (0 for one agentd
    never saw), whether the bot wrote it, and the text the reply quotes. The taint rules read
    the quote as whose words it is (agent/taint.py, memory/provenance.py). The bot's words are
    taken from agentd's own record of what it sent in this room, never from the body's
    fallback, which the sender's client writes and can make say anything; with no record (a
    notice, an answer retention removed, someone else's message) the fallback is kept as
    the sender's unverified copy. In a private room a message agentd does not know (its
    integer aged out with the history, matrix/kept.py) may be one of the bot's, which may
    carry outside text: it is read as the bot's, so its quote is never taken for the user's
    own words."""
    target, fallback, _ = reply_parts(_obj(event.get("content")))
    if not target:
        return None
    known = ids.known_id(conn, "event", target)
    from_bot = _replied_to_bot(conn, event, room)
    chat_id = ids.local_id(conn, "room", room.room_id)
    own = history.sent_text(conn, chat_id, known) if from_bot and known is not None else None
    return ReplyContext(
        message_id=known or 0,
        text=(fallback if own is None else own)[:MAX_TEXT_CHARS],
        from_bot=from_bot or (private and known is None),
        unverified=own is None,
    )


def _edit_of_a_turn(conn: Any, event: dict[str, Any], room: Room) -> bool:
    """An edit of a message of this room that was answered (so was meant for the bot): in a
    group its new text need not name the bot again, as a Telegram edit keeps the reply it
    was."""
    edit = edit_of(event)
    if not edit or not edit[0]:
        return False
    row = conn.execute(
        "SELECT outcome FROM matrix_events WHERE event_id = ? AND room_id = ?",
        (edit[0], room.room_id),
    )
    found = row.fetchone()
    return found is not None and found[0] == "turn"


def _invalid_edit(conn: Any, event: dict[str, Any], room: Room, original: str) -> str:
    """Why this edit is no edit (the spec's rules for `m.replace`), or "" when it is one: the
    original is a message agentd took in, in this room, from this sender, and no edit itself.
    Anyone may send an `m.replace` naming any event: only its own sender's edit counts."""
    row = conn.execute(
        "SELECT room_id, sender, kind FROM matrix_events WHERE event_id = ?", (original,)
    ).fetchone()
    if row is None:
        return "an edit of a message agentd never took in"
    if row[0] != room.room_id or row[1] != str(event.get("sender") or ""):
        return "an edit of someone else's message"
    if row[2] != event.get("type"):  # an edit itself (EDIT_KIND), a reaction, …
        return "an edit of an event that cannot be edited"
    return ""


def _take_event(
    conn: Any,
    event: dict[str, Any],
    room: Room,
    me: MatrixIdentity,
    engine: Engine,
    on_callback: CallbackHandler,
    on_command: CommandHook,
    result: SyncResult,
    busy: BusyMode,
) -> MatrixIdentity:
    """Record one timeline event and start what it asks for; returns whom the bot serves from
    it on (a `/start CODE` it redeemed serves its sender)."""
    event_id, sender = str(event.get("event_id") or ""), str(event.get("sender") or "")
    if not event_id or "state_key" in event:
        return me  # room state (membership, names) was taken in by apply_state
    if conn.execute("SELECT 1 FROM matrix_events WHERE event_id = ?", (event_id,)).fetchone():
        result.duplicates += 1
        return me
    kind = str(event.get("type") or "")[:100]
    # A savepoint per event: one that cannot be read or started is recorded as failed without
    # rolling back the rest of the sync, so intake never stalls on it (nor re-reads it).
    conn.execute("SAVEPOINT one_event")
    try:
        paired = _pair_if_asked(conn, event, room, me)
        replied = _replied_to_bot(conn, event, room) or _edit_of_a_turn(conn, event, room)
        decision = classify_event(event, room, paired, replied_to_bot=replied)
        if decision.action == "ignore" and decision.reason == "the bot's own event":
            conn.execute("RELEASE one_event")
            return me  # the echo of a send: nothing to record
        kind = EDIT_KIND if edit_of(event) is not None else decision.kind
        outcome, instance_id = _apply(
            conn, event, decision, room, paired, engine, on_callback, on_command, result, busy
        )
        me = paired
    except Exception as exc:
        conn.execute("ROLLBACK TO one_event")
        outcome, instance_id = "failed", None
        audit.record(conn, "intake_error", detail={"event": event_id, "error": type(exc).__name__})
    conn.execute("RELEASE one_event")
    conn.execute(
        "INSERT INTO matrix_events (event_id, received_at, room_id, sender, kind, outcome, "
        "instance_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (event_id, time.time(), room.room_id, sender[:300], kind, outcome, instance_id),
    )
    return me


def _pair_if_asked(
    conn: Any, event: dict[str, Any], room: Room, me: MatrixIdentity
) -> MatrixIdentity:
    """A stranger's `/start CODE` in their direct room with the bot: paired, or linked to the
    code's user (`agentd pair --link USER`), if the code is good; else they still get nothing,
    and a room joined for the code is left at the end of the sync."""
    sender = str(event.get("sender") or "")
    body = _obj(event.get("content")).get("body")
    if event.get("type") != "m.room.message" or not isinstance(body, str) or me.served(sender):
        return me
    code = pairing.code_in(body)
    if code is None or room.encrypted or not room.private_with(me.bot, sender):
        return me
    redeemed = pairing.redeem(
        conn,
        code,
        user_id=ids.local_id(conn, "user", sender),
        chat_id=ids.local_id(conn, "room", room.room_id),
        username=sender[:300],
        now=time.time(),
        channel=CHANNEL,
    )
    rooms.pairing_settled(conn, room.room_id, redeemed.ok)
    return me.model_copy(update={"allowed": me.allowed | {sender}}) if redeemed.ok else me


def _user_id(conn: Any, sender: str, me: MatrixIdentity) -> int:
    """The agentd user a Matrix account speaks for (`access.accounts.user_of`). `[matrix]
    owner` is the simple way to link: that account is linked to the owner when first met,
    and remembered as the one the configuration linked (`settle_owner`)."""
    account = ids.local_id(conn, "user", sender)
    user = accounts.user_of(conn, account)
    if sender == me.owner and me.owner_id is not None and user != me.owner_id:
        accounts.link(conn, account, me.owner_id, CHANNEL, time.time())
        _set_kv(conn, OWNER_KEY, sender)
        return me.owner_id
    return user


def _set_kv(conn: Any, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE "
        "SET value = excluded.value",
        (key, value),
    )


def settle_owner(conn: Any, me: MatrixIdentity) -> None:
    """Unlink the account an earlier `[matrix] owner` linked, once the configuration names
    another or none: it is then nobody (not served, no approver), and the owner is no longer
    reached in its rooms. The owner's account linked before this was remembered is
    remembered at the first sync that finds it linked."""
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (OWNER_KEY,)).fetchone()
    linked = str(row[0]) if row else None
    if linked is None:
        account = ids.known_id(conn, "user", me.owner) if me.owner else None
        if account is not None and accounts.user_of(conn, account) == me.owner_id:
            _set_kv(conn, OWNER_KEY, me.owner)
        return
    if linked == me.owner:
        return
    account = ids.known_id(conn, "user", linked)
    owner = accounts.user_of(conn, account) if account is not None else None
    if account is not None and owner is not None and owner != account:
        if accounts.unlink(conn, account, owner, CHANNEL, time.time()):
            reach.forget_user(conn, owner, CHANNEL)
    conn.execute("DELETE FROM kv WHERE key = ?", (OWNER_KEY,))


def _apply(
    conn: Any,
    event: dict[str, Any],
    decision: EventDecision,
    room: Room,
    me: MatrixIdentity,
    engine: Engine,
    on_callback: CallbackHandler,
    on_command: CommandHook,
    result: SyncResult,
    busy: BusyMode,
) -> tuple[str, str | None]:
    sender = str(event.get("sender") or "")
    if decision.action in ("ignore", "leave"):
        result.ignored.append((room.room_id, sender, decision.reason))
    if decision.action == "leave":
        reason = (
            rooms.ENCRYPTED_REASON
            if decision.reason == "encrypted room"
            else rooms.GROUPS_OFF_REASON
        )
        _start_room_action(conn, engine, room.room_id, "leave", reason, sender, result)
        return "leave", None
    if decision.action == "reject":
        audit.record(conn, "access_denied", detail={"channel": "matrix", "kind": decision.kind})
        return "reject", None
    if decision.action == "reaction":
        outcome = _reaction(conn, event, room, me, on_callback)
        result.presses += outcome == "callback"
        return outcome, None
    if decision.action not in ("turn", "edit"):
        return decision.action, None
    if decision.action == "edit":
        invalid = _invalid_edit(conn, event, room, decision.original)
        if invalid:
            result.ignored.append((room.room_id, sender, invalid))
            return "edit_invalid", None
    local_event = ids.local_id(conn, "event", str(event["event_id"]), room.room_id)
    shown = decision.shown or event
    private = room.private_with(me.bot, sender)
    turn = turn_of(
        shown,
        local_event=local_event,
        chat_id=ids.local_id(conn, "room", room.room_id),
        user_id=_user_id(conn, sender, me),
        private=private,
        reply_to=_reply_context(conn, shown, room, private),
    )
    instance_id = instance_id_of(str(event["event_id"]))
    if decision.action == "edit":
        return _edited(conn, turn, decision.original, room, instance_id, engine, result)
    if turn.private:  # where notices and approval cards find this user (chat/reach.py)
        reach.note_private_chat(conn, turn.user_id, CHANNEL, turn.chat_id, time.time())
    command = on_command(turn, conn)
    if command is not None:
        name, inp, key = command
        engine.prepare_start(conn, name, inp, instance_id=instance_id, key=key)
        result.keys.add(key)
        return "command", instance_id
    # The same rule as every channel's: steer the owner's working turn, interrupt or queue.
    turn, interrupted = plan_busy(conn, turn, instance_id, busy, time.time())
    if interrupted is not None:
        result.cancels.append(interrupted)
    key = chat_key(turn.chat_id)
    engine.prepare_start(conn, TURN_WORKFLOW, turn, instance_id=instance_id, key=key)
    result.keys.add(key)
    result.accepted += 1
    return "turn", instance_id


def _edited(
    conn: Any,
    turn: TurnInput,
    original: str,
    room: Room,
    instance_id: str,
    engine: Engine,
    result: SyncResult,
) -> tuple[str, str | None]:
    """The owner's correction, as a Telegram `edited_message` is (agent/edits.py): the turn
    names the original message; a working or queued turn of it is replaced, an answered one
    gets the correction as a turn of its own. Never a command, never steers (busy.py)."""
    message = ids.local_id(conn, "event", original, room.room_id)
    turn = turn.model_copy(update={"message_id": message, "edited": True})
    plan = plan_edit(conn, turn, time.time())
    if plan.turn is None:
        return "edit_unchanged", None
    if plan.action == "replace" and plan.previous is not None:
        result.cancels.append(plan.previous)
    key = chat_key(plan.turn.chat_id)
    engine.prepare_start(conn, TURN_WORKFLOW, plan.turn, instance_id=instance_id, key=key)
    result.keys.add(key)
    result.accepted += 1
    return f"edit_{plan.action}", instance_id


def _reaction(
    conn: Any, event: dict[str, Any], room: Room, me: MatrixIdentity, on_callback: CallbackHandler
) -> str:
    """A reaction on a card is a press of the button it stands for; any other is nothing. A
    card's key on an event with no choices known may answer a card sent just before a kill -9
    whose choices were not yet written down: kept, and pressed once they are (`take_early`)."""
    relates = _obj(_obj(event.get("content")).get("m.relates_to"))
    target, key = relates.get("event_id"), relates.get("key")
    if relates.get("rel_type") != "m.annotation" or not isinstance(target, str):
        return "ignore"
    row = conn.execute(
        "SELECT data FROM matrix_buttons WHERE event_id = ? AND reaction = ?", (target, key)
    ).fetchone()
    sender = str(event.get("sender") or "")
    if row is None:
        if key not in KEYCAPS:
            return "ignore"
        conn.execute(
            "INSERT OR IGNORE INTO matrix_early_reactions (event_id, target, reaction, room_id, "
            "sender, made_at) VALUES (?, ?, ?, ?, ?, ?)",
            (str(event["event_id"]), target, key, room.room_id, sender[:300], time.time()),
        )
        return "early"
    _press(conn, str(event["event_id"]), target, str(row[0]), room, sender, me, on_callback)
    return "callback"  # counted by the caller


def _press(
    conn: Any,
    reaction: str,
    target: str,
    data: str,
    room: Room,
    sender: str,
    me: MatrixIdentity,
    on_callback: CallbackHandler,
) -> None:
    press = CallbackPress(
        update_id=ids.local_id(conn, "event", reaction, room.room_id),
        callback_id=reaction,
        user_id=_user_id(conn, sender, me),
        chat_id=ids.local_id(conn, "room", room.room_id),
        message_id=ids.local_id(conn, "event", target, room.room_id),
        data=data,
        chat_kind="private" if room.private_with(me.bot, sender) else "group",  # type: ignore[call-arg]
    )
    on_callback(conn, press)


def take_early(
    conn: Any, me: MatrixIdentity, on_callback: CallbackHandler, result: SyncResult
) -> None:
    """Press each kept reaction whose card's choices are known now, as its sender, in the
    room it was written in; one whose sender is no longer served is dropped unpressed."""
    rows = conn.execute(
        "SELECT e.event_id, e.target, b.data, e.room_id, e.sender FROM matrix_early_reactions e "
        "JOIN matrix_buttons b ON b.event_id = e.target AND b.reaction = e.reaction"
    ).fetchall()
    for reaction, target, data, room_id, sender in rows:
        conn.execute("DELETE FROM matrix_early_reactions WHERE event_id = ?", (reaction,))
        if me.served(sender):
            _press(conn, reaction, target, data, _room(conn, room_id), sender, me, on_callback)
            result.presses += 1
