"""An automation's settings and secrets come through agentd's one secret reader, only by the
names the owner listed, and its events through their declared models: the appointment
example's 5-digit ZIP rule and its choices, checked without a daemon."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from agentd.automations.catalog import Catalog
from agentd.automations.runtime import Runtime
from agentd.config import Config
from agentd.config.schema import AutomationsConfig
from agentd.daemon.capabilities import secret_values
from agentd.durable import InvalidInput, NonRetryable

DESK = Path(__file__).resolve().parents[1] / "examples" / "automations" / "appointments"


def _desk() -> Any:
    spec = importlib.util.spec_from_file_location("desk_rules", DESK / "appointments.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


desk = _desk()


def _runtime(config: Config) -> Runtime:
    return Runtime(
        config=config,
        db=None,  # type: ignore[arg-type]
        clock=None,  # type: ignore[arg-type]
        catalog=Catalog(),
        outbox=None,  # type: ignore[arg-type]
        llm=None,
        kick=lambda key: None,
    )


def test_a_listed_setting_is_read_from_agentd_env_and_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`agentd run` in a terminal: agentd.env is not in the environment, the reader finds it."""
    monkeypatch.delenv("APPOINTMENTS_BOOKING_TOKEN", raising=False)
    config = Config(automations=AutomationsConfig(secrets=["APPOINTMENTS_BOOKING_TOKEN"]))
    config.stored_secrets["APPOINTMENTS_BOOKING_TOKEN"] = "tok-from-agentd-env"
    assert _runtime(config).secret("APPOINTMENTS_BOOKING_TOKEN") == "tok-from-agentd-env"
    assert "tok-from-agentd-env" in secret_values(config, config.secret_source())
    monkeypatch.setenv("APPOINTMENTS_BOOKING_TOKEN", "tok-from-env")  # the environment first
    assert _runtime(config).secret("APPOINTMENTS_BOOKING_TOKEN") == "tok-from-env"


def test_a_name_the_owner_did_not_list_is_refused_with_the_fix() -> None:
    config = Config()
    config.stored_secrets["TELEGRAM_BOT_TOKEN"] = "123:abc"
    with pytest.raises(NonRetryable, match=r"not in \[automations\] secrets: add it there"):
        _runtime(config).secret("TELEGRAM_BOT_TOKEN")


@pytest.mark.parametrize("typo", ["1234", "abcde", "941070", "9410a", " 9410", "", "94 107"])
def test_the_zip_rule_refuses_anything_but_five_digits(typo: str) -> None:
    catalog = Catalog()
    catalog.add(desk.verify_caller)
    with pytest.raises(InvalidInput, match=r"invalid verify_zip for verify_caller: zip"):
        catalog.validated_event("verify_caller", "2", "verify_zip", {"zip": typo})
    assert catalog.validated_event("verify_caller", "2", "verify_zip", {"zip": "94107"}) == {
        "zip": "94107"
    }


def test_each_flow_names_the_events_it_takes() -> None:
    catalog = Catalog()
    for flow in (desk.verify_caller, desk.reschedule_appointment, desk.cancel_appointment):
        catalog.add(flow)
    with pytest.raises(InvalidInput, match="waits for no event 'select_slot'"):
        catalog.validated_event("verify_caller", "2", "select_slot", {"slotId": "s"})
    with pytest.raises(InvalidInput, match="confirm"):
        catalog.validated_event("cancel_appointment", "2", "cancel_confirm", {"confirm": "maybe"})
    with pytest.raises(InvalidInput, match="by"):
        catalog.validated_event("cancel_appointment", "2", "approve_escalation", {"approve": 1})
    choice = catalog.validated_event(
        "reschedule_appointment", "2", "select_slot", {"slotId": "slot_201"}
    )
    assert choice == {"slotId": "slot_201"}


async def test_run_from_chat_with_json_nested_too_deeply_says_so() -> None:
    """/run with input nested past the JSON decoder's depth (a Matrix message can hold
    thousands of brackets) is answered with what is wrong, not an error out of the command."""
    from agentd.chat.command import CommandInput
    from agentd.config import AccessConfig

    rt = _runtime(Config(access=AccessConfig(allowed_user_ids=[7])))
    args = "greet " + "[" * 3000
    asked = CommandInput(name="run", args=args, chat_id=7, chat_kind="private", user_id=7)
    reply = await rt.run_command(asked)
    assert "nests too deeply" in reply.text
