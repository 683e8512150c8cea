"""What the dashboard's pages compute: cost per schedule and automation."""

from __future__ import annotations

import time
from pathlib import Path

from agentd.dashboard import auth, spend
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations


def test_cost_per_schedule_and_automation(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "c.db")
    apply_migrations(conn)
    now = time.time()
    rows = [
        ("sched-briefing-1a2b3c4d-1764000000", 100),
        ("sched-briefing-1a2b3c4d-1764000000-turn", 50),
        ("sched-s1-1764000000", 10),
        ("auto-1", 7),
        ("tg-update-1", 1000),
    ]
    for instance, tokens in rows:
        conn.execute(
            "INSERT INTO llm_usage (at, instance_id, purpose, model, input_tokens, "
            "output_tokens) VALUES (?, ?, 'turn', 'claude-haiku-4-5', ?, 0)",
            (now, instance, tokens),
        )
    conn.execute(
        "INSERT INTO workflow_instances (id, workflow, key, status, input, created_at, "
        "updated_at) VALUES ('auto-1', 'digest', 'k', 'complete', '{}', ?, ?)",
        (now, now),
    )
    conn.execute(
        "INSERT INTO automation_runs (instance_id, automation, version, source, created_at) "
        "VALUES ('auto-1', 'digest', 'v1', 'x', ?)",
        (now,),
    )
    found = spend.groups(conn, now - 60, None)
    conn.execute(
        "INSERT INTO vision_lookups (day, chat_id, hits, misses) VALUES "
        "(date(?, 'unixepoch'), 42, 3, 1), (date(?, 'unixepoch'), 43, 0, 2)",
        (now, now),
    )
    assert spend.vision_cache(conn, now - 60) == (3, 6)
    conn.close()
    assert {r["label"]: r["tokens"] for r in found["schedule"]} == {
        "briefing-1a2b3c4d": 150,
        "s1": 10,
    }
    assert {r["label"]: r["tokens"] for r in found["automation"]} == {"digest": 7}
    assert sum(r["tokens"] for r in found["day"]) == 1167


def test_always_allow_is_the_cards_button(tmp_path: Path) -> None:
    """Approve and store the offered shell rule, as "Always allow this" in the chat does."""
    from agentd.access import approvals
    from agentd.dashboard import actions
    from agentd.hands import rules
    from tests import dashboard_seed as seed

    conn = open_sync(tmp_path / "a.db")
    apply_migrations(conn)
    approval = seed.waiting_approval(conn, 1, time.time(), "shell", "ls -la /srv")
    rules.offer(conn, approval, ["ls", "-la", "/srv"])
    said = actions.approve_always(conn, approval)
    assert said.startswith("Approved, and from now on allowed: ls")
    found = approvals.get(conn, approval)
    assert found is not None and found.status == "approved" and found.decided_by == "dashboard"
    assert [(r.program, r.created_by) for r in rules.list_rules(conn)] == [("ls", "dashboard")]
    conn.close()


async def test_inside_the_daemon_changes_go_through_its_writer(tmp_path: Path) -> None:
    from agentd.dashboard.access import DaemonAccess
    from agentd.db import Database

    path = tmp_path / "d.db"
    conn = open_sync(path)
    apply_migrations(conn)
    conn.close()
    db = await Database.open(path)
    try:
        access = DaemonAccess(db)
        token = await access.write(auth.new_login, minutes=5, made_by="test")
        session = await access.write(auth.redeem, token, 1.0)
        assert session is not None
        assert await access.read(auth.session_key, session) is not None
    finally:
        await db.close()


def test_a_conversation_marks_withdrawn_and_edited_messages(tmp_path: Path) -> None:
    from agentd.dashboard import queries
    from tests import dashboard_seed as seed

    conn = open_sync(tmp_path / "e.db")
    apply_migrations(conn)
    seed.hostile_everything(conn, time.time(), "x")
    shown = queries.conversation(conn, seed.CHAT)
    conn.close()
    withdrawn = [m.content for m in shown["messages"] if m.meta.get("withdrawn")]
    assert withdrawn == ["page title: x"]
    assert shown["edited"] == {"tg-update-5"}


def test_the_schema_check_counts_every_channels_tables(tmp_path: Path) -> None:
    """A database with the core's tables but not a channel's is not "up to date": the Now
    page's check reads the schema the daemon applies, channels' migrations included."""
    from agentd.channels import migrations
    from agentd.dashboard import queries

    conn = open_sync(tmp_path / "s.db")
    apply_migrations(conn)  # the core's list alone
    core_only = queries.health(conn, time.time())[0]
    whole = queries.health(conn, time.time(), migrations())[0]
    apply_migrations(conn, migrations())
    after = queries.health(conn, time.time(), migrations())[0]
    conn.close()
    assert core_only["ok"] and core_only["detail"] == "up to date"
    assert not whole["ok"] and whole["detail"].endswith("migrations to apply")
    assert after["ok"], after


async def test_thousands_of_chats_list_only_the_most_recent(tmp_path: Path) -> None:
    """A bot in many groups has a chat each: the Conversations page stays a page."""
    from aiohttp.test_utils import TestClient, TestServer

    from agentd.dashboard.access import FileAccess
    from agentd.dashboard.config import DashboardConfig
    from agentd.dashboard.server import Site, make_app
    from agentd.memory.history import save_message
    from tests.test_dashboard_security import Dash, seeded

    path = tmp_path / "agentd.db"
    seeded(path, "x")
    conn = open_sync(path)
    conn.execute("BEGIN IMMEDIATE")
    for chat in range(-3000, 0):
        save_message(
            conn, chat_id=chat, user_id=7, role="user", content="hi", source_key=f"k{chat}"
        )
    conn.execute("COMMIT")
    conn.close()
    site = Site(access=FileAccess(path), config=DashboardConfig())
    async with TestClient(TestServer(make_app(site))) as client:
        await Dash(path, client, "").login()
        page = await (await client.get("/conversations")).text()
        older = await client.get("/conversations/-3000")
        older_page = await older.text()
    assert page.count('href="/conversations/') == 200
    assert 'href="/conversations/-1"' in page and 'href="/conversations/-3000"' not in page
    assert "The 200 most recently active chats" in page
    assert older.status == 200 and ">hi<" in older_page
