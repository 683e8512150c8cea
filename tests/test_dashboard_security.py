"""The dashboard is private by design: loopback only unless configured, one-time expiring
login links, scoped cookies, same-origin CSRF-checked changes, nothing learned by a stranger,
outside text escaped on every page."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agentd.access import approvals
from agentd.dashboard import auth
from agentd.dashboard.access import FileAccess
from agentd.dashboard.config import BindRefused, DashboardConfig, check_bind
from agentd.dashboard.server import Site, make_app
from agentd.dashboard.site import serve
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.ledger import audit
from agentd.runtime.logs import TextFormatter
from agentd.runtime.redact import Redactor
from tests import dashboard_seed as seed

HOSTILE = "<script>alert(1)</script>"
PAGES = (
    "/",
    "/conversations",
    f"/conversations/{seed.CHAT}",
    "/turn/tg-update-1",
    "/turn/tg-update-3",
    "/turn/tg-update-4",
    "/approvals",
    "/cost",
    "/memory",
    "/memory?q=memory",
    "/schedules",
    "/skills",
    "/audit",
    f"/audit?kind=tool_call&hours=24&chat={seed.CHAT}",
)


@dataclass
class Dash:
    path: Path
    client: TestClient
    approval: str

    def origin(self) -> str:
        return str(self.client.make_url("/")).rstrip("/")

    def link(self, **kwargs: float) -> str:
        conn = open_sync(self.path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            token = auth.new_login(
                conn, minutes=kwargs.get("minutes", 10), made_by="test", now=kwargs.get("now")
            )
            conn.execute("COMMIT")
        finally:
            conn.close()
        return token

    async def login(self) -> str:
        response = await self.client.post(
            "/login",
            data={"t": self.link()},
            headers={"Origin": self.origin()},
            allow_redirects=False,
        )
        assert response.status == 303 and response.headers["Location"] == "/"
        return await self.csrf()

    async def csrf(self) -> str:
        body = await (await self.client.get("/approvals")).text()
        return body.split('name="csrf" value="', 1)[1].split('"', 1)[0]

    def approval_status(self) -> str:
        conn = open_sync(self.path)
        try:
            found = approvals.get(conn, self.approval)
        finally:
            conn.close()
        assert found is not None
        return found.status


def seeded(path: Path, text: str) -> str:
    conn = open_sync(path)
    apply_migrations(conn)
    conn.execute("BEGIN IMMEDIATE")
    approval = seed.hostile_everything(conn, time.time(), text)
    conn.execute("COMMIT")
    conn.close()
    return approval


@pytest.fixture
async def dash(tmp_path: Path) -> AsyncIterator[Dash]:
    path = tmp_path / "agentd.db"
    approval = seeded(path, HOSTILE)
    site = Site(access=FileAccess(path), config=DashboardConfig(), daily_tokens=1_000_000)
    async with TestClient(TestServer(make_app(site))) as client:
        yield Dash(path, client, approval)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "agent.example.org"])
def test_no_bind_beyond_loopback_unless_configured(host: str) -> None:
    with pytest.raises(BindRefused, match="allow_remote"):
        check_bind(DashboardConfig(host=host))
    check_bind(DashboardConfig(host=host, allow_remote=True))


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_binds_without_asking(host: str) -> None:
    check_bind(DashboardConfig(host=host))


async def test_server_itself_refuses_a_public_bind(tmp_path: Path) -> None:
    site = Site(access=FileAccess(tmp_path / "x.db"), config=DashboardConfig(host="0.0.0.0"))
    with pytest.raises(BindRefused):
        await serve(site)


async def test_login_link_works_once(dash: Dash) -> None:
    token = dash.link()
    first = await dash.client.post(
        "/login", data={"t": token}, headers={"Origin": dash.origin()}, allow_redirects=False
    )
    assert first.status == 303
    dash.client.session.cookie_jar.clear()
    again = await dash.client.post(
        "/login", data={"t": token}, headers={"Origin": dash.origin()}, allow_redirects=False
    )
    assert again.status == 200 and "expired or was already used" in await again.text()
    assert auth.COOKIE not in again.cookies


async def test_the_session_cookie_never_reaches_a_log_line(tmp_path: Path) -> None:
    """The cookie signs in as the owner: the process serving the site teaches it to its
    redactor at login, and, for a session made before a restart, at its first request."""
    path = tmp_path / "agentd.db"
    seeded(path, "x")
    made_by, restarted = Redactor(), Redactor()
    first = Site(access=FileAccess(path), config=DashboardConfig(), learn=made_by.learn)
    async with TestClient(TestServer(make_app(first))) as client:
        dash = Dash(path, client, "")
        await dash.login()
        cookie = client.session.cookie_jar.filter_cookies(client.make_url("/"))[auth.COOKIE]
    session = cookie.value
    assert len(session) > 20
    record = logging.makeLogRecord(
        {"msg": "request failed", "headers": {"Cookie": f"{auth.COOKIE}={session}"}}
    )
    for redactor in (made_by, restarted):
        line = TextFormatter(redactor).format(record)
        assert (session not in line) is (redactor is made_by), line
    later = Site(access=FileAccess(path), config=DashboardConfig(), learn=restarted.learn)
    async with TestClient(TestServer(make_app(later))) as client:
        client.session.cookie_jar.update_cookies({auth.COOKIE: session})
        assert (await client.get("/approvals", allow_redirects=False)).status == 200
    line = TextFormatter(restarted).format(record)
    assert session not in line and "[REDACTED]" in line, line


async def test_login_link_expires(dash: Dash) -> None:
    token = dash.link(minutes=10, now=time.time() - 11 * 60)
    response = await dash.client.post(
        "/login", data={"t": token}, headers={"Origin": dash.origin()}, allow_redirects=False
    )
    assert response.status == 200 and auth.COOKIE not in response.cookies


async def test_only_the_token_hash_is_stored(dash: Dash) -> None:
    token = dash.link()
    assert token.encode() not in dash.path.read_bytes()
    wal = dash.path.with_name(dash.path.name + "-wal")
    assert not wal.exists() or token.encode() not in wal.read_bytes()


async def test_opening_the_link_does_not_spend_it(dash: Dash) -> None:
    """A chat app's link preview fetches the URL: only the button's POST signs in."""
    token = dash.link()
    page = await dash.client.get(f"/login?t={token}")
    assert page.status == 200 and auth.COOKIE not in page.cookies
    assert 'action="/login"' in await page.text()
    signed = await dash.client.post(
        "/login", data={"t": token}, headers={"Origin": dash.origin()}, allow_redirects=False
    )
    assert signed.status == 303


@pytest.mark.parametrize("public_url", ["", "https://agent.example.org"])
async def test_session_cookie_is_scoped(tmp_path: Path, public_url: str) -> None:
    path = tmp_path / "agentd.db"
    seeded(path, "x")
    config = DashboardConfig(public_url=public_url, session_hours=2)
    async with TestClient(TestServer(make_app(Site(FileAccess(path), config)))) as client:
        dash = Dash(path, client, "")
        response = await client.post(
            "/login",
            data={"t": dash.link()},
            headers={"Origin": dash.origin()},
            allow_redirects=False,
        )
    secure = public_url.startswith("https://")
    assert list(response.cookies) == [auth.cookie_name(secure)]
    assert response.cookies.keys() == {"__Host-agentd_session" if secure else "agentd_session"}
    cookie = response.cookies[auth.cookie_name(secure)]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Strict"
    assert cookie["path"] == "/"
    assert cookie["max-age"] == str(2 * 3600)
    assert not cookie["domain"]
    assert bool(cookie["secure"]) == secure


async def test_a_stranger_learns_nothing(dash: Dash) -> None:
    """Every path, known or not, sends a stranger to the same login page naming nothing."""
    bodies = set()
    for path in [*PAGES, "/turn/no-such-turn", "/no-such-page", "/memory/export"]:
        for cookie in (None, "forged-session"):
            headers = {"Cookie": f"{auth.COOKIE}={cookie}"} if cookie else {}
            response = await dash.client.get(path, headers=headers, allow_redirects=False)
            assert response.status == 303, path
            assert response.headers["Location"] == "/login"
            assert await response.text() in ("", "303: See Other")
    login = await dash.client.get("/login")
    bodies.add(await login.text())
    (body,) = bodies
    for leak in (str(seed.OWNER), "tg-update", "write_file", "approval", "alert"):
        assert leak not in body


async def test_a_strangers_post_changes_nothing(dash: Dash) -> None:
    response = await dash.client.post(
        f"/approvals/{dash.approval}",
        data={"decision": "approve"},
        headers={"Origin": dash.origin()},
        allow_redirects=False,
    )
    assert response.status == 303 and response.headers["Location"] == "/login"
    assert dash.approval_status() == "pending"


async def test_bad_csrf_token_is_refused(dash: Dash) -> None:
    await dash.login()
    for csrf in ("", "0" * 64, "nonsense"):
        response = await dash.client.post(
            f"/approvals/{dash.approval}",
            data={"decision": "approve", "csrf": csrf},
            headers={"Origin": dash.origin()},
        )
        assert response.status == 403
    assert dash.approval_status() == "pending"


@pytest.mark.parametrize("origin", ["https://evil.example", "null", None])
async def test_cross_site_form_post_fails(dash: Dash, origin: str | None) -> None:
    """A form on another site carries the cookie only without SameSite=Strict; even then the
    Origin check refuses it, with the right CSRF token too."""
    csrf = await dash.login()
    headers = {"Origin": origin} if origin else {}
    response = await dash.client.post(
        f"/approvals/{dash.approval}",
        data={"decision": "approve", "csrf": csrf},
        headers=headers,
    )
    assert response.status == 403
    assert dash.approval_status() == "pending"


async def test_approve_is_the_same_decision_as_the_cli(dash: Dash) -> None:
    csrf = await dash.login()
    response = await dash.client.post(
        f"/approvals/{dash.approval}",
        data={"decision": "approve", "csrf": csrf},
        headers={"Origin": dash.origin()},
    )
    assert response.status == 200 and "Approved: write_file." in await response.text()
    assert dash.approval_status() == "approved"
    conn = open_sync(dash.path)
    try:
        decided = [e for e in audit.entries(conn, kind="approval_decided")]
        event = conn.execute(
            "SELECT payload FROM workflow_events WHERE type = ?",
            (approvals.event_type(dash.approval),),
        ).fetchone()
    finally:
        conn.close()
    assert decided[-1].detail["by"] == "dashboard"
    assert '"approved"' in event[0]
    again = await dash.client.post(
        f"/approvals/{dash.approval}",
        data={"decision": "deny", "csrf": csrf},
        headers={"Origin": dash.origin()},
    )
    assert "Already decided: approved." in await again.text()


async def test_a_watch_is_paused_and_resumed_from_the_schedules_page(dash: Dash) -> None:
    csrf = await dash.login()
    page = await (await dash.client.get("/schedules")).text()
    assert "/watches/w1/pause" in page and "700" in page  # its told check's tokens

    async def post(op: str) -> str:
        response = await dash.client.post(
            f"/watches/w1/{op}", data={"csrf": csrf}, headers={"Origin": dash.origin()}
        )
        return await response.text()

    def state() -> str:
        conn = open_sync(dash.path)
        try:
            return conn.execute("SELECT state FROM watches WHERE id = 'w1'").fetchone()[0]
        finally:
            conn.close()

    assert "Watch w1: paused." in await post("pause") and state() == "paused"
    assert "Watch w1: active." in await post("resume") and state() == "active"
    assert "neither paused nor capped" in await post("resume")


async def test_outside_text_is_escaped_on_every_page(dash: Dash) -> None:
    await dash.login()
    for path in PAGES:
        response = await dash.client.get(path)
        body = await response.text()
        assert response.status == 200, path
        assert "<script>alert" not in body, path
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    shown = "".join([await (await dash.client.get(p)).text() for p in PAGES])
    wheres = ("mail subject: ", "page title: ", "file name: ", "memory: ", "skill ", "watch ")
    for where in wheres:
        assert where + "&lt;script&gt;" in shown, where
    export = await dash.client.get("/memory/export")
    assert "<script" not in await export.text()


async def test_no_secret_is_rendered(tmp_path: Path) -> None:
    path = tmp_path / "agentd.db"
    seeded(path, "x")
    site = Site(
        FileAccess(path),
        DashboardConfig(),
        accounts=[{"kind": "mail", "name": "home", "address": "me@example.org"}],
    )
    async with TestClient(TestServer(make_app(site))) as client:
        dash = Dash(path, client, "")
        await dash.login()
        pages = [await (await client.get(p)).text() for p in PAGES]
    assert "me@example.org" in "".join(pages)
    for page in pages:
        assert "token_hash" not in page and "session_hash" not in page


async def test_signing_out_ends_the_session(dash: Dash) -> None:
    csrf = await dash.login()
    cookie = dash.client.session.cookie_jar.filter_cookies(dash.client.make_url("/"))
    session = cookie[auth.COOKIE].value
    out = await dash.client.post(
        "/logout", data={"csrf": csrf}, headers={"Origin": dash.origin()}, allow_redirects=False
    )
    assert out.status == 303 and out.headers["Location"] == "/login"
    again = await dash.client.get(
        "/", headers={"Cookie": f"{auth.COOKIE}={session}"}, allow_redirects=False
    )
    assert again.status == 303 and again.headers["Location"] == "/login"


@pytest.mark.parametrize(
    ("host", "config", "trusted"),
    [
        ("127.0.0.1:8765", DashboardConfig(), True),
        ("localhost:8765", DashboardConfig(), True),
        ("[::1]:8765", DashboardConfig(host="::1"), True),
        ("evil.example:8765", DashboardConfig(), False),
        ("agent.example.org", DashboardConfig(public_url="https://agent.example.org"), True),
        ("evil.example", DashboardConfig(public_url="https://agent.example.org"), False),
        ("192.168.1.5:8765", DashboardConfig(host="192.168.1.5", allow_remote=True), True),
        ("anything:8765", DashboardConfig(host="0.0.0.0", allow_remote=True), True),
    ],
)
def test_host_header_must_name_the_dashboard(
    host: str, config: DashboardConfig, trusted: bool
) -> None:
    """A rebinding attacker's page sends its own name in Host: turned away before anything."""
    from agentd.dashboard.server import trusted_host

    assert trusted_host(host, config) is trusted


async def test_a_rebound_name_is_turned_away(dash: Dash) -> None:
    response = await dash.client.get(
        "/login", headers={"Host": "attacker.example:80"}, allow_redirects=False
    )
    assert response.status == 421 and "Sign in" not in await response.text()


async def test_a_flash_message_comes_from_the_server_only(dash: Dash) -> None:
    """`?done=` in a link someone sent shows nothing, on the login page or behind it; what the
    server itself said after a change is sealed for the session and shown."""
    lure = "Your session expired: sign in again at https://evil.example/login"
    forged = f"?{urlencode({'done': lure})}"
    login_page = await (await dash.client.get(f"/login{forged}")).text()
    assert "evil.example" not in login_page
    csrf = await dash.login()
    for path in ("/approvals", "/memory"):
        assert "evil.example" not in await (await dash.client.get(f"{path}{forged}")).text()
    sealed_elsewhere = f"?{urlencode({'done': lure, 'seal': '0' * 64})}"
    assert (
        "evil.example" not in await (await dash.client.get(f"/approvals{sealed_elsewhere}")).text()
    )
    response = await dash.client.post(
        f"/approvals/{dash.approval}",
        data={"decision": "deny", "csrf": csrf},
        headers={"Origin": dash.origin()},
        allow_redirects=False,
    )
    assert response.status == 303 and "seal=" in response.headers["Location"]
    shown = await (await dash.client.get(response.headers["Location"])).text()
    assert "Denied: write_file." in shown


BEYOND_SQLITE = "9" * 20  # a whole number, but beyond SQLite's 64-bit INTEGER


@pytest.mark.parametrize(
    "path",
    [
        f"/conversations/{BEYOND_SQLITE}",
        f"/memory/{BEYOND_SQLITE}",
        f"/audit?chat={BEYOND_SQLITE}",
        "/memory?q=%00",
        "/memory?q=%E2%80%8F%E2%80%8B%22%00%22",  # RTL and zero-width marks, quotes, a NUL
    ],
)
async def test_an_odd_number_or_search_is_answered_not_a_server_error(
    dash: Dash, path: str
) -> None:
    await dash.login()
    response = await dash.client.get(path)
    assert response.status in (200, 400, 404), path
    assert "Internal Server Error" not in await response.text()


async def test_a_change_naming_a_number_beyond_sqlite_is_answered(dash: Dash) -> None:
    csrf = await dash.login()
    for path in (f"/rules/{BEYOND_SQLITE}/remove", f"/memory/{BEYOND_SQLITE}/pin"):
        response = await dash.client.post(
            path, data={"csrf": csrf}, headers={"Origin": dash.origin()}, allow_redirects=False
        )
        assert response.status == 404, path


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/audit?chat=abc", "The chat id filter takes a whole number"),
        ("/audit?hours=soon", "The since (hours) filter takes a whole number"),
        ("/cost?days=1.5", "The days filter takes a whole number"),
    ],
)
async def test_a_filter_that_is_not_a_number_says_so(dash: Dash, path: str, said: str) -> None:
    """Typed into a page's filter, a wrong value is the owner's to correct: say what it takes."""
    await dash.login()
    response = await dash.client.get(path)
    assert response.status == 400 and said in await response.text()


async def test_an_empty_filter_is_its_default(dash: Dash) -> None:
    """A browser sends the emptied number field as `days=`: the default, not an error."""
    await dash.login()
    cost = await dash.client.get("/cost?days=")
    assert cost.status == 200 and "Last 30 days" in await cost.text()
    audit_page = await dash.client.get("/audit?kind=&hours=&chat=+")
    assert audit_page.status == 200
