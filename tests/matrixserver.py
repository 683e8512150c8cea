"""A real Matrix homeserver for the tests: Synapse (from the package index) on a loopback port.

One Synapse per test module keeps the suite's wall time small (a start costs about two
seconds). Its configuration is generated into a temporary folder: SQLite, one client
listener on 127.0.0.1, no federation (no key servers, an empty federation allowlist), users
registered through the shared-secret admin API, and rate limits raised so tests never wait on
them. `Synapse.restart()` keeps the database, so what survives a homeserver restart can be
tested.

`MatrixUser` is a plain-HTTP Matrix client (urllib), the way a person's client talks to the
server: it is independent of the library agentd uses, so a test can't pass by sharing its bug.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes._server import FakeServer

SERVER_NAME = "agentd.test"
START_TIMEOUT = 60.0
_OPEN = {"per_second": 1000, "burst_count": 1000}

_LOG_CONFIG = """\
version: 1
formatters:
  plain:
    format: "%(asctime)s %(levelname)s %(name)s %(message)s"
handlers:
  file:
    class: logging.FileHandler
    filename: {log}
    formatter: plain
root:
  level: WARNING
  handlers: [file]
disable_existing_loggers: false
"""


def http(
    method: str,
    url: str,
    *,
    body: Any = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, bytes]:
    """One request; (status, body) for any HTTP answer, OSError when nothing answered."""
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(root: Path, port: int, shared_secret: str) -> dict[str, Any]:
    return {
        "server_name": SERVER_NAME,
        "public_baseurl": f"http://127.0.0.1:{port}/",
        "pid_file": str(root / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client", "media"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(root / "homeserver.db")}},
        "log_config": str(root / "log.yaml"),
        "media_store_path": str(root / "media"),
        "max_upload_size": "5M",
        "registration_shared_secret": shared_secret,
        "enable_registration": False,
        "report_stats": False,
        "macaroon_secret_key": secrets.token_hex(16),
        "form_secret": secrets.token_hex(16),
        "signing_key_path": str(root / "signing.key"),
        # No federation: no key servers to ask, no other server may be spoken to.
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "federation_domain_whitelist": [],
        "url_preview_enabled": False,
        "enable_metrics": False,
        "presence": {"enabled": False},
        "rc_message": _OPEN,
        "rc_registration": _OPEN,
        "rc_login": {"address": _OPEN, "account": _OPEN, "failed_attempts": _OPEN},
        "rc_joins": {"local": _OPEN, "remote": _OPEN},
        "rc_joins_per_room": _OPEN,
        "rc_invites": {"per_room": _OPEN, "per_user": _OPEN, "per_issuer": _OPEN},
        "rc_admin_redaction": _OPEN,
        "rc_media_create": _OPEN,
        "rc_delayed_event_mgmt": _OPEN,
        "rc_reports": _OPEN,
        "rc_room_creation": _OPEN,
        "rc_profile": _OPEN,
        "rc_key_requests": _OPEN,
        "rc_third_party_invite": _OPEN,
        "rc_user_directory": _OPEN,
    }


@dataclass
class Synapse:
    """One homeserver process; `url` is its client-server API base."""

    root: Path
    port: int = field(default_factory=_free_port)
    shared_secret: str = field(default_factory=lambda: secrets.token_hex(16))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "homeserver.log"

    def write_config(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "log.yaml").write_text(_LOG_CONFIG.format(log=self.log_path))
        path = self.root / "homeserver.yaml"
        # JSON is YAML: no YAML writer needed.
        path.write_text(json.dumps(_config(self.root, self.port, self.shared_secret)))
        return path

    def start(self, timeout: float = START_TIMEOUT) -> Synapse:
        path = self.root / "homeserver.yaml"
        if not path.exists():
            path = self.write_config()
        command = [sys.executable, "-m", "synapse.app.homeserver", "--config-path", str(path)]
        with (self.root / "stderr.log").open("ab") as stderr:
            if not (self.root / "signing.key").exists():
                # Writes the signing key and exits.
                subprocess.run(
                    [*command, "--generate-keys"],
                    stdout=stderr,
                    stderr=stderr,
                    check=True,
                    timeout=timeout,
                )
            self.proc = subprocess.Popen(
                command, cwd=self.root, stdout=stderr, stderr=stderr, start_new_session=True
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Bounded: the versions endpoint answers, or the process died, or time ran out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"Synapse exited at start:\n{self.tail()}")
            with contextlib.suppress(OSError):
                if http("GET", f"{self.url}/_matrix/client/versions", timeout=2.0)[0] == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"Synapse did not answer within {timeout}s:\n{self.tail()}")

    def tail(self) -> str:
        out = []
        for name in ("stderr.log", "homeserver.log"):
            with contextlib.suppress(OSError):
                out.append((self.root / name).read_text()[-3000:])
        return "\n".join(out)

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, *, kill: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL) and start again on the same database and port."""
        self.stop(kill=kill)
        self.start()

    def register(self, localpart: str, password: str, *, admin: bool = False) -> str:
        """A user through the shared-secret admin API; returns the full user id."""
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = _json(http("GET", endpoint))["nonce"]
        parts = (nonce, localpart, password, "admin" if admin else "notadmin")
        signed = b"\x00".join(part.encode() for part in parts)
        mac = hmac.new(self.shared_secret.encode(), signed, hashlib.sha1).hexdigest()
        body = {
            "nonce": nonce,
            "username": localpart,
            "password": password,
            "admin": admin,
            "mac": mac,
        }
        return str(_json(http("POST", endpoint, body=body))["user_id"])

    def login(self, localpart: str, password: str, device_id: str | None = None) -> MatrixUser:
        body: dict[str, Any] = {
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": localpart},
            "password": password,
        }
        if device_id:
            body["device_id"] = device_id
        data = _json(http("POST", f"{self.url}/_matrix/client/v3/login", body=body))
        return MatrixUser(self, data["user_id"], data["access_token"], data["device_id"])


@dataclass
class MatrixUser:
    """A person's Matrix client, in plain HTTP: the owner or a stranger in the tests."""

    server: Synapse
    user_id: str
    token: str
    device_id: str
    since: str | None = None

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def call(
        self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        url = f"{self.server.url}/_matrix/client/v3{path}{query}"
        if body is None and method in ("POST", "PUT"):
            body = {}
        return _json(http(method, url, body=body, headers=self.auth), f"{method} {path}")

    def create_room(self, *, invite: list[str] = (), direct: bool = True, **extra: Any) -> str:  # type: ignore[assignment]
        body: dict[str, Any] = {"invite": list(invite), "is_direct": direct}
        body["preset"] = "trusted_private_chat" if direct else "private_chat"
        body.update(extra)
        return str(self.call("POST", "/createRoom", body)["room_id"])

    def join(self, room_id: str) -> None:
        self.call("POST", f"/join/{_q(room_id)}", {})

    def invite(self, room_id: str, user_id: str) -> None:
        self.call("POST", f"/rooms/{_q(room_id)}/invite", {"user_id": user_id})

    def send(
        self,
        room_id: str,
        content: dict[str, Any],
        *,
        txn_id: str | None = None,
        event_type: str = "m.room.message",
        state: bool = False,
    ) -> str:
        if state:  # a state event with the empty state key
            path = f"/rooms/{_q(room_id)}/state/{_q(event_type)}/"
            return str(self.call("PUT", path, content)["event_id"])
        txn = txn_id or secrets.token_hex(8)
        path = f"/rooms/{_q(room_id)}/send/{_q(event_type)}/{_q(txn)}"
        return str(self.call("PUT", path, content)["event_id"])

    def say(self, room_id: str, text: str) -> str:
        return self.send(room_id, {"msgtype": "m.text", "body": text})

    def say_txn(self, room_id: str, text: str, txn_id: str) -> str:
        return self.send(room_id, {"msgtype": "m.text", "body": text}, txn_id=txn_id)

    def react(self, room_id: str, event_id: str, key: str) -> str:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return self.send(room_id, content, event_type="m.reaction")

    def messages(self, room_id: str, limit: int = 200) -> list[dict[str, Any]]:
        """The room's events, oldest first (what the server holds, not what a client shows)."""
        path = f"/rooms/{_q(room_id)}/messages"
        chunk = self.call("GET", path, params={"dir": "b", "limit": limit})["chunk"]
        return list(reversed(chunk))

    def from_user(
        self, room_id: str, sender: str, event_type: str = "m.room.message"
    ) -> list[dict[str, Any]]:
        return [
            e
            for e in self.messages(room_id)
            if e.get("sender") == sender and e.get("type") == event_type
        ]

    def joined_members(self, room_id: str) -> list[str]:
        return list(self.call("GET", f"/rooms/{_q(room_id)}/joined_members")["joined"])

    def upload(self, data: bytes, content_type: str, filename: str) -> str:
        query = urllib.parse.urlencode({"filename": filename})
        url = f"{self.server.url}/_matrix/media/v3/upload?{query}"
        headers = {**self.auth, "Content-Type": content_type}
        return str(_json(http("POST", url, data=data, headers=headers), "upload")["content_uri"])

    def download(self, mxc: str) -> bytes:
        server, media_id = mxc.removeprefix("mxc://").split("/", 1)
        url = f"{self.server.url}/_matrix/client/v1/media/download/{server}/{media_id}"
        status, data = http("GET", url, headers=self.auth)
        if status != 200:
            raise RuntimeError(f"download {mxc} → {status}")
        return data


def _json(answer: tuple[int, bytes], what: str = "") -> dict[str, Any]:
    status, data = answer
    if status >= 400:
        raise RuntimeError(f"{what} → {status}: {data[:300]!r}")
    return dict(json.loads(data))


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Poll a server-side fact until it holds (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what or predicate}")
        time.sleep(0.05)


@contextlib.contextmanager
def synapse_running(root: Path) -> Iterator[Synapse]:
    server = Synapse(root).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Cast:
    """Synapse with the three accounts every Matrix test needs, logged in as clients."""

    server: Synapse
    bot_password: str
    owner: MatrixUser
    stranger: MatrixUser

    @property
    def bot_user_id(self) -> str:
        return f"@bot:{SERVER_NAME}"


@contextlib.contextmanager
def cast_running(root: Path) -> Iterator[Cast]:
    """One homeserver with `bot`, `owner` and `stranger` registered (the bot not logged in:
    agentd logs it in itself)."""
    with synapse_running(root) as server:
        bot_password = secrets.token_hex(12)
        server.register("bot", bot_password)
        users = {}
        for name in ("owner", "stranger"):
            password = secrets.token_hex(12)
            server.register(name, password)
            users[name] = server.login(name, password)
        yield Cast(server, bot_password, users["owner"], users["stranger"])


class WindowProxy(FakeServer):
    """Between agentd and Synapse: forwards everything, and can open a kill window.

    `hold_after(marker)`: the next send whose body holds `marker` reaches Synapse (the event
    is stored) and its answer never comes back. `hold_before(marker)`: the next such send is
    held before it reaches Synapse (nothing is stored). `cut_sync(marker)`: the next /sync answer
    whose body holds `marker` is delivered cut off mid-body, so agentd has the events and can
    never commit them. Either way the test then kills agentd inside that window.
    `hold_until_synced(marker, synced)`: the next send whose body holds `marker` reaches
    Synapse, and its answer waits until agentd was given a whole /sync answer holding `synced`
    (an order of events the network may give, made certain). `fail_after(marker, times)`: the
    next `times` sends whose body holds `marker` reach Synapse and are answered 502 (a gateway
    that lost Synapse's answer), so agentd's retries of them all fail too. `fail_before(marker,
    times)`: the next `times` such sends are answered 502 without reaching Synapse (the
    homeserver down for them).
    """

    shutdown_timeout = 0.2

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream
        self._hold: str | None = None
        self._hold_before: str | None = None
        self._cut: str | None = None
        self._until: tuple[str, str] | None = None
        self._fail: tuple[str, int] | None = None  # `fail_after`: marker, sends left
        self._fail_before: tuple[str, int] | None = None  # `fail_before`: marker, sends left
        self._awaited: list[str] = []  # markers of `hold_until_synced` to see in a sync
        self._synced: list[str] = []  # those agentd was given
        self.held: list[str] = []  # bodies of the sends held after Synapse took them
        self.held_before: list[str] = []  # bodies of the sends held before Synapse saw them
        self.cut: list[str] = []  # the sync answers cut
        self.failed: list[str] = []  # bodies of the sends Synapse took, answered 502
        self.refused: list[str] = []  # bodies of the sends answered 502 before Synapse
        self.sends: list[str] = []  # the path of every send (it ends in the transaction id)

    def hold_after(self, marker: str) -> None:
        with self._lock:
            self._hold = marker

    def hold_before(self, marker: str) -> None:
        with self._lock:
            self._hold_before = marker

    def fail_after(self, marker: str, times: int) -> None:
        with self._lock:
            self._fail = (marker, times)

    def fail_before(self, marker: str, times: int) -> None:
        with self._lock:
            self._fail_before = (marker, times)

    def cut_sync(self, marker: str) -> None:
        with self._lock:
            self._cut = marker

    def hold_until_synced(self, marker: str, synced: str) -> None:
        with self._lock:
            self._until = (marker, synced)
            self._awaited.append(synced)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._forward)

    def _on_loop_started(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        body = await request.read()
        text = body.decode("utf-8", "replace")
        with self._lock:
            before = self._hold_before
            before = before is not None and "/send/" in request.path and before in text
            if before:
                self._hold_before = None
                self.held_before.append(text)
                self.sends.append(request.path)
                self._changed()
        if before:
            await asyncio.sleep(3600)  # agentd is killed meanwhile
        with self._lock:
            down = self._fail_before
            down = (
                down if down is not None and "/send/" in request.path and down[0] in text else None
            )
            if down is not None:
                self._fail_before = (down[0], down[1] - 1) if down[1] > 1 else None
                self.refused.append(text)
                self._changed()
        if down is not None:
            return web.Response(status=502, text="the homeserver is down")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        url = f"{self.upstream}{request.rel_url}"
        async with self._session.request(
            request.method,
            url,
            data=body or None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(200),
        ) as answer:
            data = await answer.read()
            status, content_type = answer.status, answer.headers.get("Content-Type", "")
        with self._lock:
            hold = self._hold is not None and "/send/" in request.path and self._hold in text
            cut = self._cut is not None and request.path.endswith("/sync")
            cut = cut and self._cut in data.decode("utf-8", "replace")
            if "/send/" in request.path:
                self.sends.append(request.path)
            if hold:
                self._hold = None
                self.held.append(text)
            fail = self._fail is not None and "/send/" in request.path and self._fail[0] in text
            if fail and self._fail is not None:
                left = self._fail[1] - 1
                self._fail = (self._fail[0], left) if left else None
                self.failed.append(text)
            if cut:
                self._cut = None
                self.cut.append(request.path)
            until = self._until if "/send/" in request.path else None
            if until is not None and until[0] in text:
                self._until = None
            else:
                until = None
            waited = list(self._awaited) if request.path.endswith("/sync") else []
            self._changed()
        if hold:
            await asyncio.sleep(3600)  # agentd is killed meanwhile
        while until is not None and until[1] not in self._synced:
            await asyncio.sleep(0.02)  # the answer waits on the proxy's own loop
        if fail:
            return web.Response(status=502, text="the gateway lost the answer")
        response = web.StreamResponse(status=status, headers={"Content-Type": content_type})
        response.content_length = len(data)
        await response.prepare(request)
        if cut:
            await response.write(data[: len(data) // 2])
            await asyncio.sleep(3600)
        await response.write(data)
        await response.write_eof()
        synced = data.decode("utf-8", "replace")
        with self._lock:
            self._synced += [m for m in waited if m in synced]
        return response

    async def stop(self) -> None:
        await super().stop()
        # Held answers sleep for an hour: end them here, so no task is left to be destroyed
        # pending (its finalizer logging inside a later ast.parse trips a CPython 3.11 bug).
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)
        if self._session is not None:
            await self._session.close()


_HOP = {"host", "content-length", "transfer-encoding", "connection"}
