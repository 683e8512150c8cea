"""The calendar tools against a real CalDAV server (Radicale), one per module."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentd.calendar.check import check_calendar
from agentd.calendar.source import CalendarError, Source
from agentd.calendar.tools import build_calendar_tools
from agentd.config import CalendarConfig, Config
from agentd.tools import CallState, Tool, ToolContext, ToolOutcome, call_risk, execute
from tests.mailservers import Radicale

USERS = {"owner": "cal-secret-1"}
BERLIN = ZoneInfo("Europe/Berlin")
# A weekly meeting in Berlin at 09:00 across the end of summer time (2026-10-25), one
# occurrence cancelled (EXDATE) and one moved (RECURRENCE-ID), and an all-day event.
WEEKLY = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:weekly-1@test
DTSTAMP:20261001T000000Z
DTSTART;TZID=Europe/Berlin:20261016T090000
DTEND;TZID=Europe/Berlin:20261016T093000
RRULE:FREQ=WEEKLY;COUNT=6
EXDATE;TZID=Europe/Berlin:20261106T090000
SUMMARY:Standup
END:VEVENT
BEGIN:VEVENT
UID:weekly-1@test
DTSTAMP:20261001T000000Z
RECURRENCE-ID;TZID=Europe/Berlin:20261113T090000
DTSTART;TZID=Europe/Berlin:20261113T140000
DTEND;TZID=Europe/Berlin:20261113T143000
SUMMARY:Standup (moved)
END:VEVENT
END:VCALENDAR
"""
ALL_DAY = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//test//EN
BEGIN:VEVENT
UID:holiday-1@test
DTSTAMP:20261001T000000Z
DTSTART;VALUE=DATE:20261024
DTEND;VALUE=DATE:20261025
SUMMARY:Hiking day
END:VEVENT
END:VCALENDAR
"""


@pytest.fixture(scope="module")
def radicale() -> Iterator[Radicale]:
    import caldav

    with tempfile.TemporaryDirectory() as tmp:
        server = Radicale(root=Path(tmp), users=USERS).start()
        try:
            client = caldav.DAVClient(
                server.url, username="owner", password=USERS["owner"], require_tls=False
            )
            cal = client.principal().make_calendar(name="Home")
            cal.save_event(WEEKLY)
            cal.save_event(ALL_DAY)
            yield server
        finally:
            server.stop()


def tools_for(radicale: Radicale, password: str = USERS["owner"], **over: Any) -> dict[str, Tool]:
    over.setdefault("url", radicale.url)
    cal = CalendarConfig(name="home", username="owner", password_env="CAL_PW", **over)
    # The calendars are the owner's: the calls below are user 42's, in their chat.
    config = Config(
        calendar=[cal],
        agent={"timezone": "Europe/Berlin"},  # type: ignore[arg-type]
        access={"owner_id": 42},
    )
    return {t.name: t for t in build_calendar_tools(config, {"CAL_PW": password})}


async def call(tools: dict[str, Tool], name: str, tu: str = "tu-1", **args: Any) -> ToolOutcome:
    ctx = ToolContext(
        chat_id=42,
        chat_kind="private",
        user_id=42,
        instance_id="turn-cal",
        tool_use_id=tu,
        now=lambda: datetime(2026, 10, 16, 7, 0, tzinfo=BERLIN).timestamp(),
    )
    return await execute(tools[name], ctx, args)


async def test_recurring_event_across_dst_stays_at_nine_local(radicale: Radicale) -> None:
    tools = tools_for(radicale)
    out = await call(tools, "calendar_list", start="2026-10-16", days=36)
    assert out.ok, out.content
    lines = [line for line in out.content.splitlines() if "Standup" in line]
    assert lines == [
        "Fri 2026-10-16 09:00–09:30 CEST: Standup (repeats) [uid weekly-1@test]",
        "Fri 2026-10-23 09:00–09:30 CEST: Standup (repeats) [uid weekly-1@test]",
        "Fri 2026-10-30 09:00–09:30 CET: Standup (repeats) [uid weekly-1@test]",
        # 2026-11-06 is cancelled (EXDATE); 2026-11-13 was moved to 14:00
        "Fri 2026-11-13 14:00–14:30 CET: Standup (moved) (repeats) [uid weekly-1@test]",
        "Fri 2026-11-20 09:00–09:30 CET: Standup (repeats) [uid weekly-1@test]",
    ]
    assert "<untrusted_content" in out.content and tools["calendar_list"].taints


async def test_all_day_event_is_one_local_day(radicale: Radicale) -> None:
    tools = tools_for(radicale)
    sat = await call(tools, "calendar_list", start="2026-10-24")
    assert "Sat 2026-10-24 all day: Hiking day [uid holiday-1@test]" in sat.content
    sun = await call(tools, "calendar_list", start="2026-10-25")
    assert "Hiking" not in sun.content and "0 event(s)" in sun.content


async def test_free_time_leaves_out_busy_events(radicale: Radicale) -> None:
    tools = tools_for(radicale)
    out = await call(
        tools, "calendar_free", start="2026-10-30", day_start="08:00", day_end="12:00", minutes=30
    )
    assert out.content.splitlines()[1:] == [
        "Fri 2026-10-30 08:00–09:00 CET",
        "Fri 2026-10-30 09:30–12:00 CET",
    ]


async def test_create_twice_is_one_event_then_move_and_delete(radicale: Radicale) -> None:
    tools = tools_for(radicale)
    args = {"summary": "Lunch with Ana", "start": "2026-10-29T12:30", "location": "Luigi's"}
    first = await call(tools, "calendar_create", tu="tu-create", **args)
    second = await call(tools, "calendar_create", tu="tu-create", **args)  # a re-run
    assert first.ok and second.ok, first.content
    day = await call(tools, "calendar_list", start="2026-10-29")
    lunch = [line for line in day.content.splitlines() if "Lunch" in line]
    assert (
        len(lunch) == 1 and "Thu 2026-10-29 12:30–13:30 CET: Lunch with Ana @ Luigi's" in lunch[0]
    )
    uid = lunch[0].split("[uid ")[1].rstrip("]")

    moved = await call(tools, "calendar_move", uid=uid, start="2026-10-30T13:00")
    assert moved.ok, moved.content
    fri = await call(tools, "calendar_list", start="2026-10-30")
    assert "Fri 2026-10-30 13:00–14:00 CET: Lunch with Ana" in fri.content
    assert tools["calendar_delete"].risk == "high"
    gone = await call(tools, "calendar_delete", uid=uid)
    assert gone.ok, gone.content
    after = await call(tools, "calendar_list", start="2026-10-30")
    assert "Lunch" not in after.content
    missing = await call(tools, "calendar_delete", uid=uid)
    assert not missing.ok and "no event with uid" in missing.content


async def test_an_invitation_needs_approval(radicale: Radicale) -> None:
    tools = tools_for(radicale)
    create = tools["calendar_create"]
    alone = create.parse_args({"summary": "Focus", "start": "2026-10-28T10:00"})
    invite = create.parse_args(
        {"summary": "Review", "start": "2026-10-28T11:00", "attendees": ["ana@example.org"]}
    )
    assert call_risk(create, alone, CallState()).risk == "medium"
    verdict = call_risk(create, invite, CallState())
    assert verdict.risk == "high" and "invites other people" in verdict.reason


async def test_wrong_password_says_login_failed(radicale: Radicale) -> None:
    tools = tools_for(radicale, password="wrong-cal-password")
    out = await call(tools, "calendar_list")
    assert not out.ok and "home: login failed" in out.content and "CAL_PW" in out.content
    assert "wrong-cal-password" not in out.content


@pytest.fixture
def redirector(radicale: Radicale) -> Iterator[int]:
    """A server on the loopback that answers every request with a redirect: `/cal/…` to the
    real Radicale (at 127.0.0.1), `/meta/…` to the cloud metadata service. Its port."""
    import http.server
    import threading

    targets = {
        "/cal/": f"http://127.0.0.1:{radicale.port}/",
        "/meta/": "http://169.254.169.254/latest/meta-data/",
    }

    class Redirects(http.server.BaseHTTPRequestHandler):
        def redirect(self) -> None:
            prefix = next((p for p in targets if self.path.startswith(p)), None)
            self.send_response(307 if prefix else 404)
            if prefix:
                self.send_header("Location", targets[prefix] + self.path[len(prefix) :])
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_PROPFIND = do_REPORT = do_PUT = do_OPTIONS = redirect

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirects)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


async def test_a_caldav_redirect_to_a_private_or_metadata_address_is_refused(
    radicale: Radicale, redirector: int
) -> None:
    """The configured CalDAV server (`localhost`) redirects to another loopback address (a
    real Radicale there) or to the cloud metadata service: neither is followed, and the tool
    says why. The configured server is the owner's, so it may be private: configured as
    127.0.0.1, the same redirect to Radicale at 127.0.0.1 is followed (and there asked for
    the login its client kept to the first port: niquests drops the password on a change of
    port, as on one of host)."""
    for url, said in (
        (f"http://localhost:{redirector}/cal/", "127.0.0.1 is a loopback address"),
        (
            f"http://localhost:{redirector}/meta/",
            "169.254.169.254 is a cloud metadata service address",
        ),
    ):
        out = await call(tools_for(radicale, url=url, timeout=5), "calendar_list")
        assert not out.ok and "home: redirect failed: refused: redirected to" in out.content
        assert said in out.content, out.content
    url = f"http://127.0.0.1:{redirector}/cal/"
    same = await call(tools_for(radicale, url=url, timeout=5), "calendar_list")
    assert "home: login failed" in same.content, same.content


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Redirects `/start` to `Location` of the server (`server.location`), answers anything
    else with 200, and notes every path asked for (`server.asked`)."""

    def do_GET(self) -> None:
        self.server.asked.append(self.path)  # type: ignore[attr-defined]
        self.server.logins.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
        self.send_response(307 if self.path.startswith("/start") else 200)
        if self.path.startswith("/start"):
            self.send_header("Location", self.server.location)  # type: ignore[attr-defined]
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_PROPFIND = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _recorder(location: str = "") -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.asked = []  # type: ignore[attr-defined]
    server.logins = []  # type: ignore[attr-defined]
    server.location = location  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class _Dns:
    """DNS for names of the test's own. A name given several answers changes its answer with
    each question (DNS rebinding: public when a redirect is vetted, the loopback by the time
    the client connects); the last one stays."""

    def __init__(self, **answers: list[str]) -> None:
        self.answers = {name.replace("_", "."): list(a) for name, a in answers.items()}
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        found = self.answers[host]
        return [found.pop(0) if len(found) > 1 else found[0]]


def test_a_redirect_whose_dns_answer_changes_by_the_connect_is_never_sent() -> None:
    """The calendar's server redirects to a host vetted as public, whose name points at a
    loopback address by the connect (DNS rebinding): no request reaches that address,
    password or not. The client connects only to an address vetted at the connect."""
    with _recorder() as secret, _recorder() as home:
        home.location = f"http://rebind.test:{secret.server_address[1]}/secret"  # type: ignore[attr-defined]
        dns = _Dns(home_test=["127.0.0.1"], rebind_test=["93.184.216.34", "127.0.0.1"])
        url = f"http://home.test:{home.server_address[1]}/start/"
        cal = CalendarConfig(name="home", url=url, username="owner", password_env="CAL_PW")
        source = Source(cal, {"CAL_PW": USERS["owner"]}, resolve=dns)
        with pytest.raises(CalendarError) as refused:
            source.calendar()
    assert secret.asked == []  # type: ignore[attr-defined]
    assert dns.asked.count("rebind.test") == 2  # vetted, then asked again at the connect
    assert home.asked and all(p.startswith("/start") for p in home.asked)  # type: ignore[attr-defined]
    assert "redirect failed" in str(refused.value)
    assert "rebind.test resolves to 127.0.0.1, a loopback address" in str(refused.value)


class _NamesAnotherHome(_Recorder):
    """A CalDAV server whose principal's calendar home is on another host (`server.location`):
    caldav moves there for every request after, no redirect involved."""

    def do_PROPFIND(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.asked.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/":
            prop = "<d:current-user-principal><d:href>/me/</d:href></d:current-user-principal>"
        else:
            home = self.server.location  # type: ignore[attr-defined]
            prop = f"<c:calendar-home-set><d:href>{home}</d:href></c:calendar-home-set>"
        body = (
            '<d:multistatus xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:caldav"><d:response>'
            f"<d:href>{self.path}</d:href><d:propstat><d:prop>{prop}</d:prop>"
            "<d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response></d:multistatus>"
        ).encode()
        self.send_response(207)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_calendar_home_on_a_host_the_server_names_is_refused_before_any_request() -> None:
    """The server names a calendar home on another host, which resolves to the loopback:
    caldav would move there with the password; no request reaches it."""
    with _recorder() as inside:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NamesAnotherHome)
        server.asked = []  # type: ignore[attr-defined]
        server.location = f"http://inside.test:{inside.server_address[1]}/cal/"  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            dns = _Dns(home_test=["127.0.0.1"], inside_test=["127.0.0.1"])
            url = f"http://home.test:{server.server_address[1]}/"
            cal = CalendarConfig(name="home", url=url, username="owner", password_env="CAL_PW")
            with pytest.raises(CalendarError) as refused:
                Source(cal, {"CAL_PW": USERS["owner"]}, resolve=dns).calendar()
        finally:
            server.shutdown()
            server.server_close()
    assert server.asked == ["/", "/me/"]  # type: ignore[attr-defined]
    assert inside.asked == []  # type: ignore[attr-defined]
    assert "home: calendar home failed" in str(refused.value)
    assert "inside.test" not in dns.asked  # refused before it was even looked up


class _NamesAnotherHomeBehindLogin(_NamesAnotherHome):
    """`_NamesAnotherHome` that asks for a login first, as a real server does: caldav holds
    the password by the time it moves to the calendar home."""

    def do_PROPFIND(self) -> None:
        if self.headers.get("Authorization") is None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="calendars"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_PROPFIND()


@pytest.mark.parametrize("elsewhere", ["another port", "another host"])
def test_the_password_goes_only_to_the_configured_origin(elsewhere: str) -> None:
    """The server, after the login, names a calendar home on another origin: a port of its
    own host, or a host that is not the loopback (a public one, as far as the vetting can
    tell). caldav would move there, password and all; agentd refuses, sends nothing there,
    and says what to set."""
    with _recorder() as other:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NamesAnotherHomeBehindLogin)
        server.asked = []  # type: ignore[attr-defined]
        host = "home.test" if elsewhere == "another port" else "calendars.test"
        target = f"http://{host}:{other.server_address[1]}/cal/"
        server.location = target  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            dns = _Dns(home_test=["127.0.0.1"], calendars_test=["192.0.2.10"])
            url = f"http://home.test:{server.server_address[1]}/"
            cal = CalendarConfig(
                name="home", url=url, username="owner", password_env="CAL_PW", timeout=5
            )
            with pytest.raises(CalendarError) as refused:
                Source(cal, {"CAL_PW": USERS["owner"]}, resolve=dns).calendar()
        finally:
            server.shutdown()
            server.server_close()
    assert server.asked == ["/", "/me/"]  # type: ignore[attr-defined]
    assert other.asked == [] and other.logins == []  # type: ignore[attr-defined]
    said = str(refused.value)
    assert said.startswith(f"home: calendar home failed: the server at {url} named {target}")
    assert "sent nothing there" in said and f'set url = "{target}"' in said, said
    assert "calendars.test" not in dns.asked


@pytest.mark.parametrize(
    ("name", "value"),
    [("PYTHON_CALDAV_COMMDUMP", "1"), ("PYTHON_CALDAV_DEBUGMODE", "DEBUG_PDB")],
)
def test_caldavs_own_dump_switch_in_the_environment_stops_the_calendar_before_any_request(
    name: str, value: str
) -> None:
    """caldav's debug switches would write the password to /tmp or stop in a debugger: with
    one set, no request leaves and the error says which variable to unset."""
    with _recorder() as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        cal = CalendarConfig(name="home", url=url, username="owner", password_env="CAL_PW")
        with pytest.raises(CalendarError) as refused:
            Source(cal, {"CAL_PW": USERS["owner"], name: value}).calendar()
    assert server.asked == [] and server.logins == []  # type: ignore[attr-defined]
    said = str(refused.value)
    assert said.startswith(f"home: environment failed: {name} set in agentd's environment")
    assert "unset it and restart agentd" in said and USERS["owner"] not in said


def test_caldavs_production_mode_in_the_environment_is_no_reason_to_refuse() -> None:
    env = {"CAL_PW": USERS["owner"], "PYTHON_CALDAV_DEBUGMODE": "PRODUCTION"}
    with _recorder() as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        cal = CalendarConfig(name="home", url=url, username="owner", password_env="CAL_PW")
        with pytest.raises(CalendarError) as failed:
            Source(cal, env).calendar()
    assert "environment" not in str(failed.value)
    assert server.asked  # type: ignore[attr-defined]


async def test_caldav_connects_to_the_address_agentd_resolved(radicale: Radicale) -> None:
    """The calendar's own host is resolved by agentd too (no name here but the test's own):
    the connection goes to the address the resolver answered, nowhere else."""
    dns = _Dns(calendar_test=["127.0.0.1"])
    cal = CalendarConfig(
        name="home",
        url=f"http://calendar.test:{radicale.port}/",
        username="owner",
        password_env="CAL_PW",
    )
    config = Config(
        calendar=[cal],
        agent={"timezone": "Europe/Berlin"},  # type: ignore[arg-type]
        access={"owner_id": 42},
    )
    tools = {t.name: t for t in build_calendar_tools(config, {"CAL_PW": USERS["owner"]}, dns)}
    out = await call(tools, "calendar_list", start="2026-10-16")
    assert out.ok and "Standup" in out.content, out.content
    assert set(dns.asked) == {"calendar.test"}


def _self_signed(root: Path, name: str) -> tuple[Path, Path]:
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}"),
            *("-addext", f"subjectAltName=DNS:{name}"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_a_pinned_connection_still_checks_the_certificate_against_the_host_name(
    tmp_path: Path,
) -> None:
    """The resolver says where to connect; TLS still checks the certificate against the
    URL's host name, not the address: a name the certificate does not carry is refused."""
    import ssl

    import niquests

    from agentd.net.pinned import pinned_session
    from agentd.net.safe_fetch import FetchPolicy

    cert, key = _self_signed(tmp_path, "calendar.test")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with _recorder() as server:
        server.socket = context.wrap_socket(server.socket, server_side=True)
        port = server.server_address[1]
        dns = _Dns(calendar_test=["127.0.0.1"], elsewhere_test=["127.0.0.1"])
        policy = FetchPolicy(allowed_hosts=("calendar.test", "elsewhere.test"))
        with pinned_session(f"https://calendar.test:{port}/", policy, dns) as session:
            ok = session.get(f"https://calendar.test:{port}/page", verify=str(cert), timeout=10)
        with pinned_session(f"https://elsewhere.test:{port}/", policy, dns) as session:
            with pytest.raises(niquests.exceptions.SSLError):
                session.get(f"https://elsewhere.test:{port}/page", verify=str(cert), timeout=10)
        assert ok.status_code == 200 and server.asked == ["/page"]  # type: ignore[attr-defined]


def test_a_bare_domain_as_the_url_says_what_to_configure() -> None:
    """caldav would look a bare domain up (DNS SRV and TXT, /.well-known/), out of reach of
    the vetting; agentd asks for the calendar's address instead."""
    with pytest.raises(ValueError) as refused:
        CalendarConfig(name="home", url="dav.example.com", username="owner")
    said = str(refused.value)
    assert "https://dav.example.com/" in said and "not looked up" in said, said


def _feed_tools(feeds: list[CalendarConfig]) -> dict[str, Tool]:
    config = Config(
        calendar=feeds,
        agent={"timezone": "Europe/Berlin"},  # type: ignore[arg-type]
        access={"owner_id": 42},
    )
    return {t.name: t for t in build_calendar_tools(config, {})}


async def test_an_ics_feed_is_read_only(tmp_path: Path) -> None:
    import functools
    import http.server
    import threading

    (tmp_path / "feed.ics").write_text(WEEKLY)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/feed.ics"
        tools = _feed_tools([CalendarConfig(name="holidays", url=url)])
        assert set(tools) == {"calendar_list", "calendar_free"}  # nothing that writes
        out = await call(tools, "calendar_list", start="2026-10-30")
        assert "Fri 2026-10-30 09:00–09:30 CET: Standup (repeats)" in out.content, out.content
        gone = CalendarConfig(name="gone", url=url.replace("feed.ics", "missing.ics"))
        config = Config(calendar=[gone], access={"owner_id": 42})  # type: ignore[arg-type]
        missing = await call({t.name: t for t in build_calendar_tools(config, {})}, "calendar_list")
        assert not missing.ok and "gone: " in missing.content and "404" in missing.content
    finally:
        server.shutdown()


async def test_a_feed_is_parsed_only_in_the_bounded_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feed is anyone's bytes (a 50 MB description cost the daemon 20 s and 400 MB):
    the daemon never parses it, and bytes that are not iCalendar are said to be so."""
    import functools
    import http.server
    import threading

    from icalendar import Calendar

    def parsed_in_the_daemon(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("outside iCalendar parsed in the daemon")

    monkeypatch.setattr(Calendar, "from_ical", classmethod(parsed_in_the_daemon))
    (tmp_path / "feed.ics").write_text(WEEKLY)
    (tmp_path / "page.ics").write_text("<html><body>Log in first</body></html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        feeds = [
            CalendarConfig(name="feed", url=f"{base}/feed.ics"),
            CalendarConfig(name="page", url=f"{base}/page.ics"),
        ]
        tools = _feed_tools(feeds)
        out = await call(tools, "calendar_list", calendar="feed", start="2026-10-30")
        assert out.ok and "09:00–09:30 CET: Standup (repeats)" in out.content, out.content
        page = await call(tools, "calendar_list", calendar="page")
        assert not page.ok and "page could not be expanded" in page.content, page.content
        # `agentd doctor` and `agentd init` read a feed through the same child.
        checks = await asyncio.to_thread(
            lambda: [check_calendar(feed, {}, "Europe/Berlin") for feed in feeds]
        )
    finally:
        server.shutdown()
    [(_, feed_ok, feed_said), (_, page_ok, page_said)] = checks
    assert feed_ok and feed_said.startswith("feed (read only)"), feed_said
    assert not page_ok and "page: reading failed" in page_said, page_said


async def test_a_feed_larger_than_the_cap_is_refused_and_its_password_stays_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feed is read up to MAX_FEED_BYTES and no further; its password goes to the feed's
    own address, never along a redirect to another server (here the same host on another
    port); a redirect to another loopback or private address is refused before it is made
    (the feed's own host is the owner's, so it may be private)."""
    import base64
    import http.server
    import threading

    from agentd.calendar import source

    monkeypatch.setattr(source, "MAX_FEED_BYTES", len(WEEKLY) + 10)
    seen: list[tuple[str, str]] = []

    class Feeds(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, self.headers.get("Authorization", "")))
            away = {
                "/away.ics": f"http://127.0.0.2:{lan_port}/stolen.ics",
                "/moved.ics": f"http://127.0.0.1:{other_port}/new.ics",
                "/ftp.ics": "ftp://x/y",
            }
            if self.path in away:
                self.send_response(302)
                self.send_header("Location", away[self.path])
                self.end_headers()
                return
            if self.path != "/new.ics" and not self.headers.get("Authorization"):
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="feeds"')
                self.end_headers()
                return
            body = (WEEKLY * (20 if self.path == "/big.ics" else 1)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    # The feed's server, the same host on another port, and another loopback address.
    servers = [
        http.server.ThreadingHTTPServer((host, 0), Feeds)
        for host in ("127.0.0.1", "127.0.0.1", "127.0.0.2")
    ]
    port, other_port, lan_port = (server.server_address[1] for server in servers)
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        feeds = [
            CalendarConfig(name=name, url=f"http://127.0.0.1:{port}/{name}.ics", username="me")
            for name in ("feed", "big", "away", "moved", "ftp")
        ]
        tools = _feed_tools(feeds)
        out = await call(tools, "calendar_list", calendar="feed", start="2026-10-30")
        assert out.ok and "Standup (repeats)" in out.content, out.content
        big = await call(tools, "calendar_list", calendar="big")
        assert not big.ok and "big: feed failed" in big.content and "larger than" in big.content
        away = await call(tools, "calendar_list", calendar="away")
        assert not away.ok and "away: feed failed: refused: redirected to" in away.content
        assert "127.0.0.2 is a loopback address" in away.content, away.content
        moved = await call(tools, "calendar_list", calendar="moved", start="2026-10-30")
        assert moved.ok and "Standup (repeats)" in moved.content, moved.content
        ftp = await call(tools, "calendar_list", calendar="ftp")
        assert not ftp.ok and "only http and https" in ftp.content, ftp.content
    finally:
        for server in servers:
            server.shutdown()
    sent = base64.b64encode(b"me:").decode()
    assert ("/feed.ics", f"Basic {sent}") in seen
    assert not [path for path, _ in seen if path == "/stolen.ics"]
    assert [auth for path, auth in seen if path == "/new.ics"] == [""]


async def test_a_feed_that_drips_ends_at_the_calendars_timeout() -> None:
    """A feed that sends a byte now and then never lets a per-read timeout fire: the whole
    answer has the calendar's timeout, and the tool says so (its server sees the hang-up
    long before the body would have ended)."""
    import http.server
    import threading

    hung_up = threading.Event()
    release = threading.Event()

    class Drip(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = WEEKLY.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for byte in body:  # a byte every 50 ms: 40 s for the whole feed
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    if release.wait(0.05):
                        return
            except OSError:
                hung_up.set()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/drip.ics"
        tools = _feed_tools([CalendarConfig(name="drip", url=url, timeout=1.0)])
        out = await call(tools, "calendar_list")
        assert not out.ok and "drip: feed failed: no complete answer within 1 s" in out.content
        assert await asyncio.to_thread(hung_up.wait, 30), "the feed's connection stayed open"
    finally:
        release.set()
        server.shutdown()
