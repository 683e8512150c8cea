"""A turn's routing decision: what it was given and why, in one line."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from agentd.agent.routing import audit_detail, decide
from agentd.chat.inputs import TurnInput
from agentd.config import Config


def message(chat_id: int, user_id: int = 42) -> TurnInput:
    return TurnInput(
        origin="chat",
        update_id=1,
        chat_id=chat_id,
        chat_kind="group" if chat_id < 0 else "private",
        user_id=user_id,
        message_id=1,
        date=0,
        kind="text",
        text="hi",
    )


def deps(**web: Any) -> Any:
    config = Config.model_validate(
        {"access": {"allowed_user_ids": [42, 43]}, "web": web} if web else {}
    )
    return SimpleNamespace(config=config)


def test_a_private_turn_with_documents_and_the_web_tool() -> None:
    tools = ["current_time", "search_docs", "web_search"]
    decision = decide(deps(), message(42), tools, "searched", "2 found for 'tea'")
    assert decision.documents and decision.web == "tool"
    assert decision.reason == (
        "recall searched (2 found for 'tea'); documents offered (the user's own documents); "
        "the web_search tool; 3 tools offered"
    )
    assert audit_detail(decision)["route"]["tools"] == tools
    assert audit_detail(None) == {}


def test_a_group_turn_is_offered_no_documents() -> None:
    decision = decide(deps(), message(-100), ["search_docs"], "skipped", "a group chat")
    assert not decision.documents and "docs.in_groups off" in decision.documents_why


def test_no_embedder_no_documents_and_the_providers_search() -> None:
    decision = decide(deps(provider="anthropic"), message(42), ["web_search"], "failed", "x")
    assert (decision.documents, decision.web) == (False, "provider")
    assert "no embedder" in decision.documents_why
