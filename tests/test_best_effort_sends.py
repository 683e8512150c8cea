"""Best-effort sends inside `deliver` (the note telling the asker a request waits, the
outcome-unknown notice) give up on a refusal for good, never on an outage or on refused
credentials: those are `deliver`'s to wait out (chat/delivery.py WAITED_OUT), so what agentd
had to say goes out once the channel is back."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentd.agent.approval_flow import Caller, Route, tell_asker
from agentd.agent.calls import report_unknown
from agentd.chat.channel import CredentialsRejected
from agentd.chat.outbox import SendDelayed, SendFailed
from agentd.llm.types import ToolUseBlock

FAILURES = [
    SendDelayed("502 Bad Gateway"),
    CredentialsRejected("Telegram rejected the bot token"),
    SendFailed("Forbidden: bot was blocked by the user"),
]


class Failing:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def send_text(self, chat_id: int, text: str, **_: Any) -> int:
        raise self.exc


def _deps(exc: Exception) -> Any:
    return SimpleNamespace(outbox=Failing(exc), redact=lambda text: text)


@pytest.mark.parametrize("exc", FAILURES, ids=lambda e: type(e).__name__)
async def test_the_askers_note_waits_out_an_outage_and_gives_up_on_a_refusal(
    exc: Exception,
) -> None:
    approval = SimpleNamespace(chat_id=7)
    if isinstance(exc, SendFailed):
        assert await tell_asker(_deps(exc), approval, "it waits") is None  # type: ignore[arg-type]
        return
    with pytest.raises(type(exc)):
        await tell_asker(_deps(exc), approval, "it waits")  # type: ignore[arg-type]


@pytest.mark.parametrize("exc", FAILURES, ids=lambda e: type(e).__name__)
async def test_the_outcome_unknown_notice_waits_out_an_outage_and_gives_up_on_a_refusal(
    exc: Exception,
) -> None:
    caller = Caller(chat_id=7, chat_kind="private", user_id=7)
    route = Route(name="shell", risk="high")
    use = ToolUseBlock(id="toolu_1", name="shell", input={"command": "make"})
    if isinstance(exc, SendFailed):
        outcome = await report_unknown(_deps(exc), caller, route, use)
        assert not outcome.ok and "shell" in outcome.content  # the model is told all the same
        return
    with pytest.raises(type(exc)):
        await report_unknown(_deps(exc), caller, route, use)
