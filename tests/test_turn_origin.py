"""A turn's input says where it came from: only a chat message carries Telegram ids, so
nothing answers or edits "message 0" for a schedule's, a webhook's or a mailbox's turn; and
inputs journaled before the origin existed (Telegram zeros) still load."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from agentd.automations.hooks import HookServer
from agentd.chat import reach
from agentd.chat.inputs import TurnInput
from agentd.config import AccessConfig, Config, HookConfig, HooksConfig
from agentd.db import Database
from agentd.telegram.classify import classify_update
from tests.test_classify import ME, message


def test_a_chat_message_carries_its_telegram_ids() -> None:
    turn = classify_update(message(text="hi"), ME).turn
    assert turn is not None
    assert turn.origin == "chat" and turn.update_id is not None and turn.message_id is not None


async def test_a_webhook_turn_says_so_and_has_no_message(db: Database) -> None:
    started: list[TurnInput] = []
    await db.write(reach.know_private_chat, 42, "telegram", 42)  # as the channel notes it

    async def start_workflow(workflow: str, inp: TurnInput, **kw: Any) -> Any:
        started.append(inp)
        return SimpleNamespace(created=True)

    route = HookConfig(prompt="A note arrived.", secret_env="UNIT_SECRET")
    config = Config(
        access=AccessConfig(allowed_user_ids=[42]),
        hooks=HooksConfig(enabled=True, routes={"notes": route}),
    )
    runtime = SimpleNamespace(catalog=SimpleNamespace(versions={}), db=db)
    server = HookServer(config, runtime, start_workflow, wake=None, env={})  # type: ignore[arg-type]
    await server._start_turn(server.routes["notes"], {"note": "milk"}, "d-1")
    [turn] = started
    assert turn.origin == "webhook" and (turn.update_id, turn.message_id) == (None, None)
    assert turn.chat_id == 42 and turn.outside_source == "a webhook delivery (notes)"


# As m035_chat_kind leaves a journaled input: its chat's kind filled in (test_channel_neutral).
OLD = {
    "chat_id": 7,
    "chat_kind": "private",
    "user_id": 7,
    "date": 1.0,
    "kind": "text",
    "text": "hello",
}


@pytest.mark.parametrize(
    ("journaled", "origin"),
    [
        ({"update_id": 5, "message_id": 9}, "chat"),
        ({"update_id": 5, "message_id": 0}, "chat"),  # a message whose id could not be read
        ({"update_id": 0, "message_id": 0, "schedule_id": "s1"}, "schedule"),
        ({"update_id": 0, "message_id": 0, "outside_source": "a webhook delivery (ci)"}, "webhook"),
        ({"update_id": 0, "message_id": 0}, "mail"),
    ],
)
def test_inputs_journaled_without_an_origin_still_load(
    journaled: dict[str, Any], origin: str
) -> None:
    turn = TurnInput.model_validate_json(json.dumps({**OLD, **journaled}))
    assert turn.origin == origin
    # Telegram's ids start at 1: a journaled zero was never a message to reply to.
    assert turn.message_id == (journaled["message_id"] or None)
    assert TurnInput.model_validate_json(turn.model_dump_json()) == turn


def test_telegram_ids_belong_to_chat_turns_only() -> None:
    with pytest.raises(ValidationError, match="has no Telegram message"):
        TurnInput(origin="schedule", update_id=3, message_id=4, **OLD)
    with pytest.raises(ValidationError, match="needs the Telegram update id"):
        TurnInput(origin="chat", **OLD)
    with pytest.raises(ValidationError, match="origin"):
        TurnInput(**OLD)  # a new producer must say where its turn comes from
