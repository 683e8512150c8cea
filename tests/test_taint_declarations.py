"""Every tool says at its declaration whether its result is outside content (`taints`) and
whether it changes the owner's data or sends data out (`egress`): checked over the real
declarations, built as the daemon builds them. The end-to-end proof is tests/test_e2e_taint.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentd.calendar.tools import build_calendar_tools
from agentd.config import Config
from agentd.hands.files import GROUP_REFUSAL, not_in_groups, workspace_tools
from agentd.mail.tools import build_mail_tools
from agentd.memory.provenance import quoted_source, window_sources
from agentd.memory.summarise import BlockMessage, block_origin
from agentd.memory.tools import memory_tools
from agentd.schedule.tools import schedule_tools
from agentd.tools import CallState, ToolContext, call_risk
from agentd.tools.builtin import builtin_tools
from agentd.web.tools import web_tools

# The tools whose results can carry bytes neither the user nor agentd wrote (search_memory
# says so per call: only a memory drawn from outside content is).
TAINTS = {
    "fetch_url",
    "web_search",
    "list_files",
    "read_file",
    "mail_search",
    "mail_read",
    "mail_draft",
    "calendar_list",
}
# The tools that change the owner's mail, calendar, files, schedules or memory, or send out.
EGRESS = {
    "remember",
    "schedule",
    "cancel_schedule",
    "write_file",
    "edit_file",
    "delete_file",
    "mail_send",
    "mail_draft",
    "mail_move",
    "mail_flag",
    "mail_save_attachment",
    "calendar_create",
    "calendar_move",
    "calendar_delete",
}


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("decl")
    account = {"name": "home", "address": "me@example.org", "password_env": "X"}
    config = Config.model_validate(
        {
            "mail": [{**account, "imap_host": "imap.example.org", "smtp_host": "smtp.example"}],
            "calendar": [{"name": "home", "url": "https://dav.example/", "password_env": "X"}],
            "tools": {"workspace": {"path": str(tmp / "ws")}},
        }
    )
    built = [
        *builtin_tools(config.tools),
        *web_tools(None, None, config.web, None),  # type: ignore[arg-type]
        *memory_tools(None, None, config.memory),  # type: ignore[arg-type]
        *schedule_tools(None, config, lambda _: None),  # type: ignore[arg-type]
        *workspace_tools(config, None),  # type: ignore[arg-type]
        *build_mail_tools(config, None, {}),  # type: ignore[arg-type]
        *build_calendar_tools(config, {}),
    ]
    return {t.name: t for t in built}


def test_every_reading_tool_taints_and_every_changing_tool_is_egress(tools: dict[str, Any]) -> None:
    assert {n for n, t in tools.items() if t.taints} == TAINTS
    assert {n for n, t in tools.items() if t.egress} == EGRESS


def test_every_change_asks_with_outside_content_in_view(tools: dict[str, Any]) -> None:
    samples = {
        "mail_move": {"uids": [1, 2], "to_folder": "Trash"},
        "mail_flag": {"uids": [1], "flag": "read"},
        "mail_save_attachment": {"uid": 1, "attachment": 1},
        "calendar_create": {"summary": "x", "start": "2026-12-01T10:00"},
        "calendar_move": {"uid": "u", "start": "2026-12-01T11:00"},
        "cancel_schedule": {"schedule_id": "s1"},
    }
    tainted = CallState(
        tainted_by=("an earlier message in this chat (a forwarded message)",),
        chat_kind="private",
    )
    for name, raw in samples.items():
        tool = tools[name]
        args = tool.parse_args(raw)
        assert call_risk(tool, args, CallState(chat_kind="private")).risk != "high", name
        verdict = call_risk(tool, args, tainted)
        assert verdict.risk == "high" and "forwarded message" in verdict.reason, name


def test_writes_to_a_users_own_state_ask_outside_a_private_chat(tools: dict[str, Any]) -> None:
    """Reading a user's memories or workspace is refused in a group; writing their memories or
    reminders there asks the owner: other members' words are in view and may be the ask."""
    samples = {
        "remember": {"content": "the door code is 1234", "kind": "fact"},
        "schedule": {"message": "open the door", "after": "1h"},
        "cancel_schedule": {"schedule_id": "s1"},
    }
    for name, raw in samples.items():
        tool = tools[name]
        args = tool.parse_args(raw)
        assert call_risk(tool, args, CallState(chat_kind="private")).risk != "high", name
        for kind in ("group", "channel", None):
            verdict = call_risk(tool, args, CallState(chat_kind=kind))  # type: ignore[arg-type]
            assert verdict.risk == "high" and "not private" in verdict.reason, (name, kind)


def test_workspace_files_are_off_in_groups() -> None:
    group = ToolContext(chat_id=-100, chat_kind="group", user_id=42, instance_id="i")
    assert not_in_groups(group) == GROUP_REFUSAL
    assert (
        not_in_groups(ToolContext(chat_id=42, chat_kind="private", user_id=42, instance_id="i"))
        is None
    )


def test_a_summary_of_outside_messages_stays_outside() -> None:
    own = [BlockMessage(id=1, role="user", content="hi", created_at=0, origin="user")]
    assert block_origin(own) == ("model", None)
    mixed = [
        *own,
        BlockMessage(
            id=2,
            role="user",
            content="fwd",
            created_at=0,
            origin="outside",
            origin_ref="a forwarded message (Eve)",
        ),
    ]
    assert block_origin(mixed) == ("outside", "a forwarded message (Eve)")
    # A block journaled before messages said where they came from: the safe side.
    legacy = BlockMessage.model_validate({"id": 3, "role": "user", "content": "x", "created_at": 0})
    assert block_origin([legacy])[0] == "outside"
    # A group's block, summarised for user 42: member 43's words are someone else's.
    group = [
        BlockMessage(id=4, role="user", content="a", created_at=0, origin="user", user_id=42),
        BlockMessage(id=5, role="user", content="b", created_at=0, origin="user", user_id=43),
    ]
    assert block_origin(group[:1], 42) == ("model", None)
    assert block_origin(group, 42) == ("outside", "another member's words in a group chat")


def test_a_quoted_notice_taints_and_a_quoted_answer_of_the_users_own_does_not(
    tmp_path: Path,
) -> None:
    from agentd.db import open_sync
    from agentd.db.migrations import apply_migrations
    from agentd.memory.history import save_message

    conn = open_sync(tmp_path / "q.db")
    apply_migrations(conn)
    save_message(conn, chat_id=5, user_id=5, role="user", content="q", source_key="a")
    save_message(
        conn,
        chat_id=5,
        user_id=None,
        role="assistant",
        content="answer",
        source_key="b",
        telegram_message_ids=[10],
    )
    save_message(
        conn,
        chat_id=5,
        user_id=None,
        role="assistant",
        content="from a page",
        source_key="c",
        telegram_message_ids=[11],
        origin="outside",
        origin_ref="fetch_url (https://e.example/)",
    )
    assert quoted_source(conn, 5, True, 10, True) is None  # the model's answer to the user
    assert (
        quoted_source(conn, 5, True, 11, True)
        == "a quoted message (fetch_url (https://e.example/))"
    )
    notice = quoted_source(conn, 5, True, 99, True)  # a job's or a mail's notice: not an answer
    assert notice is not None and "notice" in notice
    assert quoted_source(conn, 5, True, 98, False) is None  # the user's own older words
    # In a group too, the bot's answer that drew on a page brings the page with it.
    assert (
        quoted_source(conn, 5, False, 11, True)
        == "a quoted message (fetch_url (https://e.example/))"
    )
    assert quoted_source(conn, 5, False, 10, True) is None
    assert window_sources(conn, 5, 0, 100) == [
        "an earlier answer in this chat that drew on fetch_url (https://e.example/)"
    ]
    conn.close()


async def test_list_schedules_in_a_group_shows_only_that_groups(tmp_path: Path) -> None:
    """A user's reminders are private: listed in a group, only those set up there show."""
    from agentd.config import Config
    from agentd.db import Database
    from agentd.schedule.create import ScheduleRequest, create, timing
    from agentd.schedule.tools import schedule_tools
    from agentd.tools import execute

    config = Config()
    db = await Database.open(tmp_path / "s.db")
    try:
        for sid, chat, kind, text in (
            ("s-private", 42, "private", "call the bank about the loan"),
            ("s-group", -5, "group", "team standup"),
        ):
            request = ScheduleRequest(message=text, after="1h")
            await db.write(
                lambda c, sid=sid, chat=chat, kind=kind, request=request: create(
                    c,
                    request,
                    timing(request, now=1000.0, config=config.schedule, default_timezone="UTC"),
                    schedule_id=sid,
                    user_id=42,
                    chat_id=chat,
                    chat_kind=kind,
                    now=1000.0,
                    config=config.schedule,
                    by="test",
                )
            )
        tools = {t.name: t for t in schedule_tools(db, config, lambda _: None)}
        listed = tools["list_schedules"]
        group = ToolContext(chat_id=-5, chat_kind="group", user_id=42, instance_id="i")
        private = ToolContext(chat_id=42, chat_kind="private", user_id=42, instance_id="i")
        in_group = (await execute(listed, group, {})).content
        assert "team standup" in in_group and "bank" not in in_group
        assert "bank" in (await execute(listed, private, {})).content
    finally:
        await db.close()
