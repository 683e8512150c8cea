"""The built-in chat commands. None of them reaches the model or costs a token."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from agentd.access import approvals, owners, pairing
from agentd.chat import locale
from agentd.chat.model_choice import for_turn
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.commands.deps import CommandDeps
from agentd.commands.model import breaker_lines
from agentd.commands.router import (
    CommandInput,
    CommandReply,
    CommandRouter,
)
from agentd.durable import store
from agentd.durable.engine import STOPPING
from agentd.ledger import usage
from agentd.ledger.pricing import ModelPrice, Tokens, cost, price_for
from agentd.llm.pricing import price_table
from agentd.memory import history

STOPPED_CARD = "⏹ **Stopped with /stop** — `{tool}` was not run."
# A stopped turn that had not ended when /stop answers: its model call's row is not written.
STILL_ENDING = " It is still ending: what its model call cost is counted once it has."


def _preview(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def help_text(router: CommandRouter, user_id: int) -> CommandReply:
    lines = [f"/{n} — {d}" for n, d in router.menu(owner=router.is_owner(user_id))]
    can = "".join(f"\n• {line}" for line in router.abilities)
    can = f"\n\nWhat I can do:{can}" if can else ""
    return CommandReply(
        text=f"Send me a message and I'll answer.{can}\n\nCommands:\n" + "\n".join(lines)
    )


async def new_command(deps: CommandDeps, inp: CommandInput) -> CommandReply:
    await deps.db.write(history.start_fresh, inp.chat_id, deps.clock.now())
    return CommandReply(
        text="Fresh start: I won't bring up our earlier messages in this chat. Nothing was "
        "deleted; what I remember about you stays (see /memory)."
    )


def _open_turns(conn: Any, chat_id: int) -> list[store.InstanceRecord]:
    rows = conn.execute(
        f"SELECT * FROM workflow_instances WHERE key = ? AND workflow = ? "
        f"AND status IN {store.OPEN_STATUSES!r} ORDER BY seq",
        (chat_key(chat_id), TURN_WORKFLOW),
    ).fetchall()
    return [store.InstanceRecord.model_validate(dict(r)) for r in rows]


def _withdraw_approvals(conn: Any, instance_ids: list[str], now: float) -> list[approvals.Approval]:
    """Pending approvals of stopped turns are settled as denied by /stop, so no press runs them."""
    stopped = []
    for iid in instance_ids:
        rows = conn.execute(
            "SELECT id FROM approvals WHERE instance_id = ? AND status = 'pending'", (iid,)
        ).fetchall()
        for (approval_id,) in rows:
            conn.execute(
                "UPDATE approvals SET status = 'denied', decided_at = ?, decided_by = 'stop', "
                "reason = 'stopped with /stop' WHERE id = ? AND status = 'pending'",
                (now, approval_id),
            )
            approval = approvals.get(conn, approval_id)
            if approval is not None:
                stopped.append(approval)
    return stopped


def _state(conn: Any, turn: store.InstanceRecord) -> str:
    """What a turn is doing, in the words of the /stop list."""
    row = conn.execute(
        "SELECT tool FROM approvals WHERE instance_id = ? AND status = 'pending' "
        "ORDER BY created_at LIMIT 1",
        (turn.id,),
    ).fetchone()
    if row is not None:
        return f"waiting for approval of `{row[0]}`"
    if turn.status == "queued":
        return "queued"
    return "waiting" if turn.status in ("waiting", "sleeping") else "being answered"


def _open_turns_described(conn: Any, chat_id: int) -> list[tuple[store.InstanceRecord, str]]:
    return [(turn, _state(conn, turn)) for turn in _open_turns(conn, chat_id)]


def _asked(turn: store.InstanceRecord) -> str:
    return _preview(json.loads(turn.input).get("text", "") or "(no text)")


def stop_list(turns: list[tuple[store.InstanceRecord, str]]) -> CommandReply:
    lines = [f"{n}. “{_asked(t)}” — {state}" for n, (t, state) in enumerate(turns, 1)]
    return CommandReply(
        text="Several things are under way in this chat:\n\n"
        + "\n".join(lines)
        + "\n\nSend `/stop N` to stop one of them, or `/stop all`."
    )


def choose_to_stop(
    turns: list[tuple[store.InstanceRecord, str]], args: str
) -> list[store.InstanceRecord] | CommandReply:
    """`/stop` alone stops the one thing under way; with several it lists them. `/stop N` and
    `/stop all` pick from that list (numbered oldest first)."""
    arg = args.strip().lower()
    if not arg:
        return [turns[0][0]] if len(turns) == 1 else stop_list(turns)
    if arg == "all":
        return [t for t, _ in turns]
    picked = []
    for part in arg.replace(",", " ").split():
        if not part.isdecimal():
            # Only numbers alone or `all` alone pick: name what was sent, not just one word.
            return _stop_hint(turns, f"I didn't understand “/stop {_preview(args, 40)}”.")
        if not 1 <= int(part) <= len(turns):
            return _stop_hint(turns, f"There is no number {part} in the list.")
        picked.append(turns[int(part) - 1][0])
    return picked


def _stop_hint(turns: list[tuple[store.InstanceRecord, str]], problem: str) -> CommandReply:
    """What was wrong with the /stop asked for, then the list and what to send."""
    return CommandReply(text=f"{problem} " + stop_list(turns).text.split("\n\n", 1)[1])


async def stop_command(deps: CommandDeps, inp: CommandInput) -> CommandReply:
    described = await deps.db.read(_open_turns_described, inp.chat_id)
    if not described:
        return CommandReply(text="Nothing is running in this chat.")
    chosen = choose_to_stop(described, inp.args)
    if isinstance(chosen, CommandReply):
        return chosen
    return await stop_turns(deps, chosen)


async def stop_turns(deps: CommandDeps, turns: list[store.InstanceRecord]) -> CommandReply:
    ids = [t.id for t in turns]
    withdrawn = await deps.db.write(_withdraw_approvals, ids, deps.clock.now())
    # Each waited for until it has ended, so what it spent is counted; one slower than that is
    # still ending, and the reply says so.
    ending = [turn for turn in turns if await deps.cancel(turn.id) == STOPPING]
    # The stopped requests stay in `agentd history` but never reach the model again, or a
    # later message would have it carry out what the user just stopped.
    await deps.db.write(history.withdraw, ids, "stopped")
    for approval in withdrawn:
        if approval.message_id is not None:
            try:
                await deps.outbox.edit_text(
                    approval.card_chat, approval.message_id, STOPPED_CARD.format(tool=approval.tool)
                )
            except Exception:  # the card is cosmetic: the approval is already settled
                pass
    first = json.loads(turns[0].input).get("text", "")
    text = f"Stopped working on “{_preview(first)}”." if first else "Stopped the running answer."
    if withdrawn:
        tools = ", ".join(f"`{a.tool}`" for a in withdrawn)
        text += f" The approval request for {tools} is withdrawn; it was not run."
    if len(turns) > 1:
        text += f" Also stopped {len(turns) - 1} other message(s)."
    return CommandReply(text=text + _still_ending(len(turns), len(ending)))


def _still_ending(stopped: int, ending: int) -> str:
    """What the reply adds for the stopped turns that had not ended when it is sent."""
    if not ending:
        return ""
    if stopped == 1:
        return STILL_ENDING
    return f" {ending} of them are still ending: what they cost is counted once they have."


def _paired_by(conn: Any, digest: str, user_id: int) -> bool:
    """Whether the /start code of this digest is the one that paired this user, or linked an
    account to them."""
    row = conn.execute(
        "SELECT used_by, link_user_id FROM pairing_codes WHERE code_hash = ?", (digest,)
    ).fetchone()
    return row is not None and row[0] is not None and user_id in (row[0], row[1])


def _today_start(now: float) -> float:
    return now - now % 86400  # UTC midnight, as `agentd usage` counts days


def _uptime(seconds: float) -> str:
    minutes, _ = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h {minutes}m" if days else f"{hours}h {minutes}m"


# Whose figures /status shows: everyone's, the asker's, or this chat's.
Whose = Literal["all", "user", "chat"]


def _status_counts(conn: Any, inp: CommandInput, now: float, whose: Whose) -> dict[str, Any]:
    """Figures for /status: everyone's ("all", the owner in private), the asker's ("user"), or
    this chat's only ("chat", in a group, where anyone in it reads the answer)."""
    chat_turns = len(_open_turns(conn, inp.chat_id))
    open_turns = chat_turns
    if whose == "all":
        open_turns = conn.execute(
            f"SELECT COUNT(*) FROM workflow_instances WHERE workflow = ? "
            f"AND status IN {store.OPEN_STATUSES!r}",
            (TURN_WORKFLOW,),
        ).fetchone()[0]
    waiting = approvals.pending(conn, now)
    if whose == "user":
        waiting = [a for a in waiting if a.user_id == inp.user_id]
    elif whose == "chat":
        waiting = [a for a in waiting if a.chat_id == inp.chat_id]
    return {
        "open_turns": open_turns,
        "chat_turns": chat_turns,
        "approvals": len(waiting),
        "usage": usage.totals(
            conn,
            since=_today_start(now),
            user_id=inp.user_id if whose == "user" else None,
            chat_id=inp.chat_id if whose == "chat" else None,
        ),
    }


def _tokens_line(rows: list[usage.UsageTotals], prices: Mapping[str, ModelPrice]) -> str:
    """Calls, tokens and cost of usage rows; each model at its own price, 1-hour writes at 2×."""
    summed = Tokens(**{f: sum(getattr(r, f) for r in rows) for f in Tokens.model_fields})
    usd = sum(cost(r, price_for(r.model, prices)) for r in rows)
    read, written = summed.cache_read_tokens, summed.cache_write_tokens
    return (
        f"{sum(r.calls for r in rows)} model calls, "
        f"{summed.input_tokens + read + written:,} input tokens ({read:,} from cache), "
        f"{summed.output_tokens:,} output tokens, ≈ ${usd:.4f}"
    )


async def status_command(deps: CommandDeps, inp: CommandInput) -> CommandReply:
    now = deps.clock.now()
    owner = inp.user_id == owners.resolve(deps.config.access).owner_id
    # Everyone in a group reads the answer: only that group's own figures, whoever asks.
    whose: Whose = "chat" if not inp.private else "all" if owner else "user"
    counts = await deps.db.read(_status_counts, inp, now, whose)
    model = await for_turn(deps.db, deps.llm, inp.chat_id) or deps.config.llm.model
    tokens = _tokens_line(counts["usage"], price_table(deps.config.llm))
    if whose == "chat":
        figures = [
            f"**Queue:** {counts['chat_turns']} message(s) being answered in this chat",
            f"**Waiting for approval in this chat:** {counts['approvals']}",
            f"**Today (UTC), this chat:** {tokens}",
            "",
            "A group sees only its own figures; send /status in our private chat for yours.",
        ]
    else:
        figures = [
            f"**Queue:** {counts['open_turns']} message(s) being answered "
            f"({counts['chat_turns']} in this chat)",
            f"**Waiting for approval:** {counts['approvals']}",
            f"**Today (UTC){'' if owner else ', yours'}:** {tokens}",
        ]
    lines = [
        f"**Model:** `{model}`",
        *breaker_lines(deps.llm),
        f"**Up:** {_uptime(time.time() - deps.started_at)}",
        *figures,
    ]
    return CommandReply(text="\n".join(lines))


async def usage_command(deps: CommandDeps, inp: CommandInput) -> CommandReply:
    now = deps.clock.now()
    prices = price_table(deps.config.llm)
    today, week, month = await deps.db.read(
        lambda c: [
            usage.totals(c, since=since, chat_id=inp.chat_id)
            for since in (_today_start(now), now - 7 * 86400, now - 30 * 86400)
        ]
    )
    return CommandReply(
        text="Model use in this chat:\n\n"
        f"**Today (UTC):** {_tokens_line(today, prices)}\n"
        f"**Last 7 days:** {_tokens_line(week, prices)}\n"
        f"**Last 30 days:** {_tokens_line(month, prices)}\n\n"
        "Per day and chat: `agentd usage` on the server."
    )


async def language_command(deps: CommandDeps, inp: CommandInput) -> CommandReply:
    """/language: show the language I use for you; /language CODE sets it, auto unsets it."""
    code = inp.args.strip().lower()
    if not code:
        language, source = await deps.db.read(locale.current, inp.user_id)
        where = {"chosen": "you chose it", "telegram": "from your Telegram settings"}
        said = f"{language} ({where[source]})" if language else "not known yet"
        return CommandReply(
            text=f"Your language: {said}. Change it with /language CODE (de, pt-br, …), or "
            "/language auto to follow Telegram's setting."
        )
    if code != "auto" and not locale.valid(code):
        return CommandReply(
            text=f"{inp.args.strip()[:40]!r} is not a language code: try /language de, "
            "/language pt-br or /language auto."
        )
    chosen = None if code == "auto" else code
    await deps.db.write(locale.choose, inp.user_id, chosen, deps.clock.now())
    if chosen is None:
        return CommandReply(text="I'll follow your Telegram language setting again.")
    return CommandReply(
        text=f"Language set to {chosen}: I'll use it wherever your message doesn't show "
        "another, and for dates."
    )


def install(router: CommandRouter, deps: CommandDeps) -> None:
    """Register the built-in commands, in the order Telegram's menu shows them."""

    def bind(fn: Callable[[CommandDeps, CommandInput], Awaitable[CommandReply]]) -> Any:
        async def run(inp: CommandInput) -> CommandReply:
            return await fn(deps, inp)

        return run

    async def help_command(inp: CommandInput) -> CommandReply:
        return help_text(router, inp.user_id)

    async def start_command(inp: CommandInput) -> CommandReply:
        digest = pairing.start_digest(inp.args)  # the router kept no more of the code
        paired = bool(digest) and await deps.db.read(_paired_by, digest, inp.user_id)
        greeting = "You're paired: I'll answer you here. " if paired else "Hello! "
        return CommandReply(text=greeting + help_text(router, inp.user_id).text)

    router.command("help", help_command, "What I can do and the commands")
    router.command("new", bind(new_command), "Start a fresh conversation (nothing is deleted)")
    router.command(
        "stop", bind(stop_command), "Stop what I'm working on (/stop N, /stop all: one of several)"
    )
    router.command("status", bind(status_command), "Model, uptime, queue, approvals, tokens today")
    router.command("usage", bind(usage_command), "Tokens and estimated cost in this chat")
    router.command("language", bind(language_command), "The language I use for you, to change")
    router.command(
        "start",
        start_command,
        "Say hello (or pair with a code from `agentd pair`)",
        keep_args=pairing.start_digest,
    )
    # Approve / Deny: only approvers decide, and only on the card itself (access/approvals.py).
    may_approve = owners.resolve(deps.config.access).may_approve
    router.callback("ap", approvals.callback_handler(may_approve))
