"""Where a message is, said once: outside a channel's own package, no code decides privacy
from a network's id numbering (Telegram's negative group ids, its private chat ids equal to
their user's). The channel sets `chat_kind` on every input, and guards read `private`.

The check reads the source: a comparison of a chat id with a number, or of a chat id with a
user id, in Python or in an SQL string, fails naming the file and line.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from agentd.access import approvals
from agentd.channels import migrations as every_migration
from agentd.channels import packages as channel_packages
from agentd.chat.inputs import TurnInput
from agentd.commands.router import CommandInput
from agentd.db import open_sync
from agentd.db.migrations import MIGRATIONS, apply_migrations

ROOT = Path(__file__).resolve().parents[1] / "agentd"
# A channel's adapter may read its own network's numbering; the core may not.
CHANNEL_PACKAGES = tuple(channel_packages())
ORDERING = (ast.Lt, ast.Gt, ast.LtE, ast.GtE)
EQUALITY = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
_SQL = re.compile(
    r"chat_id\s*(<|>|<=|>=)\s*-?\d|\d\s*(<|>|<=|>=)\s*\w*chat_id"
    r"|chat_id\s*(=|==|!=|<>|IS)\s*\w*user_id|user_id\s*(=|==|!=|<>|IS)\s*\w*chat_id",
    re.IGNORECASE,
)


def _ident(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_chat(node: ast.AST) -> bool:
    return _ident(node).endswith("chat_id") or _ident(node) in ("chat", "chat_id")


def _is_user(node: ast.AST) -> bool:
    return _ident(node).endswith("user_id")


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    )


def id_arithmetic(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each comparison that reads privacy from id numbering."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides, sides[1:], strict=False):
                pair = (left, right)
                chat_vs_number = any(_is_chat(a) for a in pair) and any(_is_number(b) for b in pair)
                chat_vs_user = (_is_chat(left) and _is_user(right)) or (
                    _is_user(left) and _is_chat(right)
                )
                if isinstance(op, ORDERING) and chat_vs_number:
                    found.append((node.lineno, "a chat id compared with a number"))
                elif isinstance(op, (*EQUALITY, *ORDERING)) and chat_vs_user:
                    found.append((node.lineno, "a chat id compared with a user id"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _SQL.search(node.value):
                found.append((node.lineno, "SQL comparing a chat id with a number or a user id"))
    return found


def _core_sources() -> list[Path]:
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if path.relative_to(ROOT).parts[0] not in CHANNEL_PACKAGES
    ]


def test_no_id_arithmetic_outside_the_channel_packages() -> None:
    bad = [
        f"{path.relative_to(ROOT.parent)}:{line}: {what}"
        for path in _core_sources()
        for line, what in id_arithmetic(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not bad, (
        "privacy read from a network's id numbering outside its channel package; use the "
        "input's `private` / `chat_kind` (chat/inputs.py) instead:\n" + "\n".join(bad)
    )


def test_the_check_catches_each_form() -> None:
    caught = [
        "inp.chat_id < 0",
        "approval.chat_id > 0",
        "chat_id <= -1",
        "0 > press.chat_id",
        "inp.chat_id == inp.user_id",
        "ctx.user_id == ctx.chat_id == owner",
        "approval.card_chat_id != approval.user_id",
        "'SELECT 1 FROM messages WHERE chat_id < 0'",
        "'... WHERE user_id IS NULL AND chat_id = user_id'",
    ]
    for source in caught:
        assert id_arithmetic(ast.parse(source)), source
    fine = [
        "inp.private",
        "approval.card_chat_id == approval.chat_id",
        "inp.user_id == owner_id",
        "len(chat_ids) > 0",
        "'SELECT 1 FROM messages WHERE chat_id = ?'",
    ]
    for source in fine:
        assert not id_arithmetic(ast.parse(source)), source


def test_what_was_stored_before_loads_with_its_chats_kind(tmp_path: Path) -> None:
    """Journaled inputs, schedules and approvals from before chats said their kind (all
    Telegram's) load with it, filled by Telegram's rule once, by the Telegram channel's own
    migration; a row stored since keeps the kind its channel gave it."""
    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m035_chat_kind")])
    old_turn = {"origin": "chat", "update_id": 5, "message_id": 9, "chat_id": 7, "user_id": 7}
    old_turn |= {"date": 1.0, "kind": "text", "text": "hi"}
    group_command = {"name": "memory", "chat_id": -100, "user_id": 7, "message_id": 3}
    with conn:
        for iid, workflow, inp in (
            ("t1", "turn", old_turn),
            ("c1", "command", group_command),
            ("n1", "notice", {"text": "no chat here"}),
        ):
            conn.execute(
                "INSERT INTO workflow_instances (id, workflow, key, status, input, created_at, "
                "updated_at) VALUES (?, ?, 'k', 'queued', ?, 0, 0)",
                (iid, workflow, json.dumps(inp)),
            )
        conn.execute(
            "INSERT INTO schedules (id, user_id, chat_id, action, text, recurrence, timezone, "
            "catch_up, state, next_run, created_at, updated_at, created_by) VALUES "
            "('s1', 7, -100, 'message', 'x', '{}', 'UTC', 'skip', 'active', 1, 0, 0, 'you'), "
            "('s2', 7, 7, 'message', 'x', '{}', 'UTC', 'skip', 'active', 1, 0, 0, 'you')"
        )
        conn.execute(
            "INSERT INTO approvals (id, instance_id, tool_use_id, chat_id, user_id, tool, risk, "
            "args_digest, args_preview, status, created_at, expires_at, card_chat_id) VALUES "
            "('a1', 't1', 'u1', -100, 5, 'shell', 'high', 'd', 'p', 'pending', 0, 9, 7)"
        )
    ran = apply_migrations(conn, every_migration())
    assert (
        ran[: len(names) - names.index("m035_chat_kind")] == names[names.index("m035_chat_kind") :]
    )
    assert "telegram/m001_chat_kind" in ran

    def loaded(iid: str) -> dict[str, Any]:
        row = conn.execute("SELECT input FROM workflow_instances WHERE id = ?", (iid,)).fetchone()
        return json.loads(row[0])

    assert TurnInput.model_validate(loaded("t1")).private
    assert not CommandInput.model_validate(loaded("c1")).private
    assert "chat_kind" not in loaded("n1")
    kinds = dict(conn.execute("SELECT id, chat_kind FROM schedules").fetchall())
    assert kinds == {"s1": "group", "s2": "private"}
    approval = approvals.get(conn, "a1")
    assert approval is not None and not approval.private and approval.approver_id == 7


def test_a_row_stored_after_chats_said_their_kind_keeps_it(tmp_path: Path) -> None:
    """A database that took the core's steps before the Telegram channel had its own: the
    channel's fill, run then, leaves what other channels stored since (a Matrix room's
    number is positive) as its channel said."""
    conn = open_sync(tmp_path / "since.db")
    apply_migrations(conn, MIGRATIONS)
    with conn:
        conn.execute(
            "INSERT INTO schedules (id, user_id, chat_id, action, text, recurrence, timezone, "
            "catch_up, state, next_run, created_at, updated_at, created_by, chat_kind) VALUES "
            "('room', 7, ?, 'message', 'x', '{}', 'UTC', 'skip', 'active', 1, "
            "(SELECT applied_at FROM schema_migrations WHERE name = 'm035_chat_kind') + 1, "
            "0, 'you', 'group')",
            (2**53 + 5,),
        )
    assert "telegram/m001_chat_kind" in apply_migrations(conn, every_migration())
    kinds = dict(conn.execute("SELECT id, chat_kind FROM schedules").fetchall())
    assert kinds == {"room": "group"}


def test_the_private_chats_written_in_before_are_where_their_users_are_reached(
    tmp_path: Path,
) -> None:
    """The Telegram channel's own step: a user who wrote in a private chat before users had
    places to be reached (all Telegram's then) is reached there; a group is no such place."""
    conn = open_sync(tmp_path / "old.db")
    names = [name for name, _ in MIGRATIONS]
    apply_migrations(conn, MIGRATIONS[: names.index("m036_users")])
    with conn:
        conn.executemany(
            "INSERT INTO messages (chat_id, user_id, role, content, created_at) "
            "VALUES (?, ?, ?, 'hi', ?)",
            [
                (7, 7, "user", 1.0),
                (7, 7, "user", 5.0),
                (-100, 8, "user", 2.0),
                (7, None, "assistant", 6.0),
            ],
        )
    assert "telegram/m002_private_chats" in apply_migrations(conn, every_migration())
    rows = conn.execute("SELECT user_id, channel, chat_id, last_at FROM user_chats").fetchall()
    assert [tuple(r) for r in rows] == [(7, "telegram", 7, 5.0)]
