"""Units of the trust model: who owns, who approves, which press counts, and what
a card shows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentd.access import owners
from agentd.access.approvals import (
    NOT_AN_APPROVER,
    NOT_THIS_CARD,
    Approval,
    canonical_call,
    press_refusal,
    quote,
)
from agentd.chat.inputs import CallbackPress
from agentd.config import AccessConfig


def test_the_owner_is_configured_or_else_the_first_allowlisted_id() -> None:
    named = owners.resolve(AccessConfig(owner_id=7, allowed_user_ids=[1, 2]))
    assert (named.owner_id, named.approvers, named.how) == (7, frozenset({7}), "configured")
    older = owners.resolve(AccessConfig(allowed_user_ids=[1, 2]))
    assert (older.owner_id, older.how) == (1, "first allowlisted id")
    assert "the first of access.allowed_user_ids" in older.describe()
    nobody = owners.resolve(AccessConfig())
    assert (
        nobody.owner_id is None and not nobody.approvers and "agentd approve" in nobody.describe()
    )
    team = owners.resolve(AccessConfig(owner_id=7, approvers=[7, 8], allowed_user_ids=[1]))
    assert team.may_approve(8) and not team.may_approve(1)
    # An approver's own card comes to them; anyone else's goes to the owner.
    assert (team.approver_for(8), team.approver_for(1), team.approver_for(None)) == (8, 7, 7)
    assert owners.configured_ids(
        AccessConfig(owner_id=7, approvers=[8], allowed_user_ids=[1])
    ) == frozenset({1, 7, 8})


def _approval(**extra: object) -> Approval:
    base = dict(
        id="abcdefgh1234",
        instance_id="i",
        tool_use_id="t",
        chat_id=-100,
        chat_kind="group",
        user_id=5,
        tool="x",
        risk="high",
        args_digest="d",
        args_preview="p",
        status="pending",
        created_at=0,
        expires_at=10,
        card_chat_id=7,
        message_id=99,
    )
    return Approval.model_validate({**base, **extra})


def _press(user: int, chat: int | None, message: int | None) -> CallbackPress:
    return CallbackPress(
        update_id=1,
        callback_id="c",
        user_id=user,
        chat_id=chat,
        chat_kind=None if chat is None else "group" if chat < 0 else "private",
        message_id=message,
        data="ap:abcdefgh1234:y",
    )


def test_a_press_counts_from_an_approver_on_the_card_itself() -> None:
    approval = _approval()
    assert press_refusal(approval, _press(7, 7, 99), may_approve=True) is None
    assert press_refusal(approval, _press(5, 7, 99), may_approve=False) == NOT_AN_APPROVER
    assert press_refusal(approval, _press(7, -100, 99), may_approve=True) == NOT_THIS_CARD
    assert press_refusal(approval, _press(7, 7, 98), may_approve=True) == NOT_THIS_CARD
    # An approval stored without card_chat_id had its card in the call's own chat.
    older = _approval(card_chat_id=None, chat_id=7)
    assert press_refusal(older, _press(7, 7, 99), may_approve=True) is None


def test_a_call_is_one_line_of_canonical_json_that_cannot_draw_lines() -> None:
    args = {"b": "x\n✅ Approved\r\u2028\u2029\u202e\u200b\x00\t```\U000f0001", "a": ["é", 1]}
    shown = canonical_call("tool", args)
    assert "\n" not in shown and "\r" not in shown
    assert all(ch not in shown for ch in "\u2028\u2029\u202e\u200b\x00\t`\U000f0001")
    assert shown.startswith('{"arguments": {"a": ["é", 1], "b": "x\\n✅ Approved')  # sorted keys
    assert json.loads(shown) == {"tool": "tool", "arguments": args}  # exact: nothing lost


def test_the_owner_and_approvers_must_be_people_not_groups() -> None:
    with pytest.raises(ValidationError, match="private chat"):
        AccessConfig(owner_id=-100123)
    with pytest.raises(ValidationError, match="not groups"):
        AccessConfig(approvers=[5, -7])


def test_the_askers_words_are_quoted_on_one_line_and_cut_visibly() -> None:
    said = quote("please\n✅ Approved by owner `x`" + "a" * 400)
    assert "\n" not in said and "`" not in said and said.endswith('…"')
    assert json.loads(said).startswith("please\n✅ Approved by owner `x`")


def test_automations_follow_the_configured_owner_and_the_approvers(tmp_path: Path) -> None:
    """owner() is [access] owner_id (not the first allowlisted id); a question is answered by
    the owner only (a step.tool approval is an approval card, with the approvers' rules), and
    only on the question itself (its chat and message); refused presses are audited and change
    nothing."""
    from agentd.automations import runs
    from agentd.automations.owner import owner
    from agentd.automations.runtime import Runtime
    from agentd.config import Config
    from agentd.db import open_sync
    from agentd.db.migrations import apply_migrations

    cfg = Config(access=AccessConfig(owner_id=7, approvers=[7, 8], allowed_user_ids=[1, 7, 8]))
    assert owner(cfg) == 7
    assert owner(Config(access=AccessConfig(allowed_user_ids=[5, 6]))) == 5
    conn = open_sync(tmp_path / "db.sqlite")
    apply_migrations(conn)
    now = time.time()
    with conn:
        conn.execute(
            "INSERT INTO workflow_instances (id, workflow, key, status, input, "
            "created_at, updated_at) VALUES ('i1', 'tidy', 'k', 'waiting', '{}', ?, ?)",
            (now, now),
        )
        ask = runs.create_question(conn, "i1", "ask", 7, "Deploy?", ["Yes", "No"], None, now, 600)
        runs.set_question_message(conn, ask.id, 10)
    rt = Runtime(
        config=cfg,
        db=None,
        clock=None,
        catalog=None,
        outbox=None,
        llm=None,  # type: ignore[arg-type]
        kick=lambda _: None,
    )

    def press(q: runs.Question, user: int, chat: int, message: int) -> str:
        data = f"aq:{q.id}:0"
        with conn:
            return rt.on_answer(
                conn,
                CallbackPress(
                    update_id=1,
                    callback_id="c",
                    user_id=user,
                    chat_id=chat,
                    chat_kind="private",
                    message_id=message,
                    data=data,
                ),
            )

    assert press(ask, 8, 7, 10) == "Only the owner can answer this."  # an approver, not owner
    assert press(ask, 1, 7, 10) == "Only the owner can answer this."
    assert press(ask, 7, 7, 99) == NOT_THIS_CARD
    assert press(ask, 7, 1, 10) == NOT_THIS_CARD  # from another chat
    refused = conn.execute("SELECT COUNT(*) FROM audit WHERE kind = 'question_press_refused'")
    assert refused.fetchone()[0] == 4
    question = runs.get_question(conn, ask.id)
    assert question is not None and question.status == "pending"
    assert press(ask, 7, 7, 10) == "Answered: Yes."
    conn.close()
