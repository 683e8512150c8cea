"""Persist-then-acknowledge (R-IN-2): each update is committed with the work it starts."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agentd.access import accounts, pairing
from agentd.agent.busy import plan_busy
from agentd.agent.edits import plan_edit
from agentd.chat import reach
from agentd.chat.busy import BusyMode
from agentd.chat.channel import CallbackHandler, CommandHook, no_callbacks, no_commands
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.durable import Engine
from agentd.ledger import audit
from agentd.telegram import groups
from agentd.telegram.classify import Identity, UpdateDecision, classify_update, unreadable

OFFSET_KEY = "telegram_offset"
CHANNEL = "telegram"  # the channel's name (telegram/channel.py), as rows that name it say


class IntakeResult(BaseModel):
    keys: set[str] = Field(default_factory=set)
    callback_answers: list[tuple[str, str]] = Field(default_factory=list)
    accepted: int = 0
    duplicates: int = 0
    cancels: list[str] = Field(default_factory=list)  # turns an edit replaced: stop their tasks
    ignored: list[tuple[int | None, int | None, str]] = Field(default_factory=list)


def turn_instance_id(update_id: int) -> str:
    return f"tg-update-{update_id}"


def load_offset(conn: Any) -> int | None:
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (OFFSET_KEY,)).fetchone()
    return int(row[0]) if row else None


def note_ignored(conn: Any, decision: UpdateDecision, result: IntakeResult) -> None:
    """An allowed user's message in a group (groups off, or the bot not addressed): said in
    the log each time and in the audit once a day per chat and reason, never silent."""
    result.ignored.append((decision.chat_id, decision.user_id, decision.reason or ""))
    day = int(time.time() // 86400)
    audit.record(
        conn,
        "message_ignored",
        chat_id=decision.chat_id,
        user_id=decision.user_id,
        detail={"update_kind": decision.update_kind, "reason": decision.reason},
        source_key=f"ignored:{decision.chat_id}:{decision.reason}:{day}",
    )


def _apply(
    conn: Any,
    decision: UpdateDecision,
    update_id: int,
    engine: Engine,
    on_callback: CallbackHandler,
    result: IntakeResult,
    on_command: CommandHook = no_commands,
    busy: BusyMode = "queue",
) -> tuple[str, str | None]:
    turn = decision.turn if decision.action == "turn" else None
    command = on_command(turn, conn) if turn is not None else None
    if command is not None:
        name, inp, key = command
        instance_id = turn_instance_id(update_id)
        engine.prepare_start(conn, name, inp, instance_id=instance_id, key=key)
        result.keys.add(key)
        return "command", instance_id
    if decision.action == "turn" and decision.turn is not None:
        turn = decision.turn
        if turn.edited:
            plan = plan_edit(conn, turn, time.time())
            if plan.turn is None:
                return "edit_unchanged", None
            if plan.action == "replace" and plan.previous is not None:
                result.cancels.append(plan.previous)
            turn = plan.turn
        instance_id = turn_instance_id(update_id)
        turn, interrupted = plan_busy(conn, turn, instance_id, busy, time.time())
        if interrupted is not None:
            result.cancels.append(interrupted)
        key = chat_key(turn.chat_id)
        engine.prepare_start(conn, TURN_WORKFLOW, turn, instance_id=instance_id, key=key)
        result.keys.add(key)
        result.accepted += 1
        return "turn", instance_id
    if decision.action == "leave" and decision.chat_id is not None:
        if decision.update_kind in ("message", "edited_message"):
            # A served user's message in a group while groups are off: left, and said so.
            note_ignored(conn, decision, result)
        if groups.leaving(conn, decision.chat_id):
            return "leave", None
        instance_id = f"leave-{decision.chat_id}-{update_id}"
        key = groups.leave_key(decision.chat_id)
        inp = groups.LeaveInput(
            chat_id=decision.chat_id, reason=decision.reason, by=decision.user_id
        )
        engine.prepare_start(conn, groups.LEAVE_WORKFLOW, inp, instance_id=instance_id, key=key)
        result.keys.add(key)
        return "leave", instance_id
    if decision.action == "callback" and decision.callback is not None:
        answer = on_callback(conn, decision.callback)
        result.callback_answers.append((decision.callback.callback_id, answer))
        return "callback", None
    if decision.action == "ignore" and decision.user_id is not None and decision.chat_id:
        note_ignored(conn, decision, result)
    if decision.action == "reject":
        # R-IN-3: counted without content: who, when, what kind.
        audit.record(
            conn,
            "access_denied",
            chat_id=decision.chat_id,
            user_id=decision.user_id,
            detail={"update_kind": decision.update_kind, "update_id": update_id},
        )
    return decision.action, None


def _reason(exc: Exception) -> str:
    """Why an update could not be read, without its content (pydantic echoes input values)."""
    if isinstance(exc, ValidationError):
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['type']}" for e in exc.errors())
        return f"invalid fields: {where}"[:300]
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _pair_if_asked(conn: Any, update: dict[str, Any], me: Identity, now: float) -> Identity:
    """A stranger's `/start <code>` in a private chat: pair them if the code is good."""
    message = update.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("text"), str):
        return me
    sender = message.get("from") or {}
    chat = message.get("chat") or {}
    code = pairing.code_in(message["text"])
    user_id = sender.get("id")
    if code is None or not isinstance(user_id, int) or chat.get("type") != "private":
        return me
    if user_id in me.allowed_user_ids:
        return me
    result = pairing.redeem(
        conn,
        code,
        user_id=user_id,
        chat_id=chat.get("id"),
        username=str(sender.get("username") or ""),
        now=now,
        channel=CHANNEL,
    )
    if not result.ok:
        return me  # a wrong, used or expired code: the stranger still gets nothing
    return me.model_copy(update={"allowed_user_ids": me.allowed_user_ids | {user_id}})


def as_users(conn: Any, decision: UpdateDecision, now: float) -> UpdateDecision:
    """The decision with each Telegram account replaced by the agentd user it speaks for
    (access/accounts.py), and a private message noted as where its user can be reached."""
    if decision.user_id is None:
        return decision
    user = accounts.user_of(conn, decision.user_id)
    turn, press = decision.turn, decision.callback
    if turn is not None and turn.private:
        reach.note_private_chat(conn, user, CHANNEL, turn.chat_id, now)
    if user == decision.user_id:
        return decision
    return decision.model_copy(
        update={
            "user_id": user,
            "turn": turn.model_copy(update={"user_id": user}) if turn else None,
            "callback": press.model_copy(update={"user_id": user}) if press else None,
        }
    )


def persist_updates(
    conn: Any,
    updates: list[dict[str, Any]],
    me: Identity,
    engine: Engine,
    on_callback: CallbackHandler = no_callbacks,
    on_command: CommandHook = no_commands,
    busy: BusyMode = "queue",
) -> IntakeResult:
    """Record each new update and start what it asks for, then move the stored offset on;
    `busy` says what a message does while a turn of its chat works (chat/busy.py)."""
    result = IntakeResult()
    now = time.time()
    highest = None
    served = me.allowed_user_ids | pairing.paired_ids(conn)
    me = me.model_copy(update={"allowed_user_ids": accounts.served_accounts(conn, served)})
    for update in updates:
        update_id = int(update["update_id"])
        highest = update_id if highest is None else max(highest, update_id)
        seen = conn.execute("SELECT 1 FROM updates WHERE update_id = ?", (update_id,)).fetchone()
        if seen:
            result.duplicates += 1
            continue
        try:
            me = _pair_if_asked(conn, update, me, now)
            decision = as_users(conn, classify_update(update, me), now)
        except Exception as exc:  # never fatal: recorded, and its sender told where possible
            reason = _reason(exc)
            decision = unreadable(update, me, reason)
            audit.record(
                conn,
                "update_unreadable",
                chat_id=decision.chat_id,
                user_id=decision.user_id,
                detail={
                    "update_id": update_id,
                    "reason": reason,
                    "replied": decision.action == "turn",
                },
            )
        # A savepoint per update: one that cannot be started (over a limit, say) is recorded
        # as failed without rolling back the rest of the batch, so intake never stalls on it.
        conn.execute("SAVEPOINT one_update")
        try:
            outcome, instance_id = _apply(
                conn, decision, update_id, engine, on_callback, result, on_command, busy
            )
        except Exception as exc:
            conn.execute("ROLLBACK TO one_update")
            outcome, instance_id = "failed", None
            audit.record(
                conn,
                "intake_error",
                chat_id=decision.chat_id,
                user_id=decision.user_id,
                detail={"update_id": update_id, "error": type(exc).__name__},
            )
        conn.execute("RELEASE one_update")
        conn.execute(
            "INSERT INTO updates (update_id, received_at, kind, chat_id, user_id, outcome, "
            "instance_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                update_id,
                now,
                decision.update_kind,
                decision.chat_id,
                decision.user_id,
                outcome,
                instance_id,
            ),
        )
    if highest is not None:
        conn.execute(
            "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET "
            "value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
            (OFFSET_KEY, str(highest + 1)),
        )
    return result
