"""The dashboard's headers and cookies on the responses that are built unlike the rest: the web
chat's event stream (its headers go out before the middleware sees it) and the sign-out over
https (a __Host- cookie is deleted only as it was set)."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agentd.channels import migrations
from agentd.chat.channel import WebPages
from agentd.dashboard import auth
from agentd.dashboard.access import FileAccess
from agentd.dashboard.config import DashboardConfig
from agentd.dashboard.server import HEADERS, Site, make_app
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.webchat import pages, store
from agentd.webchat.outbox import Hub
from agentd.webchat.pages import ChatSite

OWNER = 42


def _token(path: Path) -> str:
    conn = open_sync(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        token = auth.new_login(conn, minutes=10, made_by="test")
        conn.execute("COMMIT")
    finally:
        conn.close()
    return token


@pytest.fixture
async def chat_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The real dashboard application with the real web chat pages mounted in it."""
    monkeypatch.setattr(pages, "STREAM_SECONDS", 0.5)
    path = tmp_path / "agentd.db"
    conn = open_sync(path)
    apply_migrations(conn, migrations())
    conn.execute("BEGIN IMMEDIATE")
    store.put_answer(conn, None, "<script>alert(1)</script>")
    conn.execute("COMMIT")
    conn.close()
    chat = ChatSite(hub=Hub(), owner_id=OWNER, files_dir=tmp_path / "webchat-files")
    chat.intake = types.SimpleNamespace(db=types.SimpleNamespace(path=path))  # type: ignore[assignment]
    site = Site(
        access=FileAccess(path),
        config=DashboardConfig(),
        pages=[WebPages("/chat", "Chat", chat.add)],
    )
    async with TestClient(TestServer(make_app(site))) as client:
        origin = str(client.make_url("/")).rstrip("/")
        signed = await client.post(
            "/login", data={"t": _token(path)}, headers={"Origin": origin}, allow_redirects=False
        )
        assert signed.status == 303
        yield client


async def test_the_event_stream_carries_the_dashboards_security_headers(chat_dash: Any) -> None:
    page = await chat_dash.get("/chat")
    assert page.status == 200
    assert page.headers["Content-Security-Policy"] == HEADERS["Content-Security-Policy"]
    events = await chat_dash.get("/chat/events?after=0")
    body = await events.read()
    assert events.status == 200 and b"<script>alert(1)</script>" in body  # raw "<" in JSON
    missing = [name for name in HEADERS if name not in events.headers]
    assert missing == [], f"/chat/events is sent without {missing}"


async def test_signing_out_over_https_clears_the_host_cookie(tmp_path: Path) -> None:
    path = tmp_path / "agentd.db"
    conn = open_sync(path)
    apply_migrations(conn)
    conn.close()
    config = DashboardConfig(public_url="https://127.0.0.1")
    site = Site(access=FileAccess(path), config=config)
    async with TestClient(TestServer(make_app(site))) as client:
        origin = "https://127.0.0.1"
        signed = await client.post(
            "/login", data={"t": _token(path)}, headers={"Origin": origin}, allow_redirects=False
        )
        cookie = signed.cookies["__Host-agentd_session"]
        assert cookie["secure"] and cookie["httponly"]
        session = cookie.value
        page = await client.get("/", headers={"Cookie": f"__Host-agentd_session={session}"})
        csrf = (await page.text()).split('name="csrf" value="', 1)[1].split('"', 1)[0]
        out = await client.post(
            "/logout",
            data={"csrf": csrf},
            headers={"Origin": origin, "Cookie": f"__Host-agentd_session={session}"},
            allow_redirects=False,
        )
        assert out.status == 303
        deletion = out.headers.getall("Set-Cookie")
        assert any(d.startswith("__Host-agentd_session=") for d in deletion)
        # A browser ignores a Set-Cookie for a "__Host-" name without Secure (RFC 6265bis
        # 4.1.3.2): this deletion never reaches the browser's cookie jar.
        assert all("Secure" in d for d in deletion), deletion
