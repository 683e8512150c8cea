"""`/model`: the owner picks the model of a chat from the configured ones; everyone may look.
The breaker lines of `/status` come from here too."""

from __future__ import annotations

from typing import Any

from agentd.access import owners
from agentd.chat import model_choice
from agentd.chat.inputs import CallbackPress
from agentd.chat.outbox import Button
from agentd.commands.deps import CommandDeps
from agentd.commands.router import CommandInput, CommandReply, CommandRouter
from agentd.ledger import audit

PREFIX = "mdl:"
DEFAULT = "default"
_BUTTON_BYTES = 64  # Telegram's limit on a button's data


def _default(llm: Any) -> str:
    models = model_choice.offered(llm)
    return str(getattr(llm, "model", "") or (models[0] if models else ""))


def _is_owner(deps: CommandDeps, user_id: int) -> bool:
    return owners.resolve(deps.config.access).owner_id == user_id


def _listing(deps: CommandDeps, current: str | None, owner: bool) -> CommandReply:
    llm = deps.llm
    default = _default(llm)
    in_use = current or default
    lines = ["Models for this chat (the fallbacks stand behind the one in use):", ""]
    buttons = []
    for label in model_choice.offered(llm):
        marks = [m for m, on in (("in use", label == in_use), ("default", label == default)) if on]
        lines.append(f"- `{label}`" + (f" ({', '.join(marks)})" if marks else ""))
        data = PREFIX + label
        if owner and label != in_use and len(data.encode()) <= _BUTTON_BYTES:
            buttons.append([Button(text=label, data=data)])
    lines.append("")
    lines.append(
        "`/model NAME` picks one, `/model default` goes back."
        if owner
        else "Only the owner can change it."
    )
    return CommandReply(text="\n".join(lines), buttons=buttons)


def _pick(conn: Any, chat_id: int, user_id: int, model: str | None) -> None:
    model_choice.choose(conn, chat_id, model)
    detail = {"command": "model", "model": model or DEFAULT}
    audit.record(conn, "command", chat_id=chat_id, user_id=user_id, detail=detail)


async def model_command(deps: CommandDeps, inp: CommandInput) -> CommandReply:
    owner = _is_owner(deps, inp.user_id)
    wanted = inp.args.strip()
    current = await model_choice.for_turn(deps.db, deps.llm, inp.chat_id)
    if not wanted:
        return _listing(deps, current, owner)
    if not owner:
        return CommandReply(text="Only the owner can change the model.")
    if wanted == DEFAULT:
        await deps.db.write(_pick, inp.chat_id, inp.user_id, None)
        return CommandReply(text=f"This chat is back on `{_default(deps.llm)}`.")
    if wanted not in model_choice.offered(deps.llm):
        reply = _listing(deps, current, owner)
        return reply.model_copy(update={"text": f"`{wanted}` is not configured.\n\n{reply.text}"})
    await deps.db.write(_pick, inp.chat_id, inp.user_id, wanted)
    return CommandReply(text=f"This chat now uses `{wanted}` (the fallbacks stay behind it).")


def _by_button(deps: CommandDeps, conn: Any, press: CallbackPress) -> str:
    if not _is_owner(deps, press.user_id):
        return "Only the owner can change the model."
    label = press.data.removeprefix(PREFIX)
    if press.chat_id is None:  # a press whose chat Telegram did not say: nothing to set
        return "This button is not recognised."
    if label not in model_choice.offered(deps.llm):
        return "That model is not configured any more."
    _pick(conn, press.chat_id, press.user_id, label)
    return f"This chat now uses {label}."


def breaker_lines(llm: Any) -> list[str]:
    """Each model's breaker, for /status: only when there is more than one model to choose."""
    status = getattr(llm, "status", None)
    rows = status() if status is not None else []
    if len(rows) < 2 and all(r["state"] == "closed" for r in rows):
        return []
    shown = []
    for row in rows:
        why = f", {row['last_reason']}" if row["state"] != "closed" and row["last_reason"] else ""
        shown.append(f"`{row['model']}` {row['state']}{why}")
    return [f"**Models:** {'; '.join(shown)}"]


def install(router: CommandRouter, deps: CommandDeps) -> None:
    async def run(inp: CommandInput) -> CommandReply:
        return await model_command(deps, inp)

    router.command("model", run, "The model of this chat (the owner picks)")
    router.callback(PREFIX.rstrip(":"), lambda conn, press: _by_button(deps, conn, press))
