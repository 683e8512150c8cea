"""The browser's one way out: an HTTP proxy in the daemon that applies net/'s address rules.

Chromium's network namespace has no route anywhere; pasta forwards one port of its loopback to
this proxy on the host's. Every request names its host (CONNECT for https, absolute-form for
http); the proxy resolves it, refuses loopback, private, link-local, CGNAT and metadata
addresses unless `[browser] allowed_hosts` lists the host (optionally with its port), and
connects to the very address it vetted (no DNS rebinding between check and connect). Each
connection carries one request (`Connection: close` both ways), so a kept-alive socket cannot
carry a second request to a host that was never vetted.

The proxy gives nothing a local process lacks (it runs on the host's loopback and reaches
only what the host reaches); it exists so that the browser reaches *less*.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from agentd.net.addresses import AddressPolicy, IPAddress, parse_ip

log = logging.getLogger("agentd.browser")
Resolve = Callable[[str, int], Awaitable[list[str]]]

_HEAD_LIMIT = 32_768
_HEAD_SECONDS = 15.0
_CONNECT_SECONDS = 15.0
_IDLE_SECONDS = 120.0
_MAX_CONNECTIONS = 64
_HOP_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"te"}
)


class Refused(Exception):
    """The request may not go out; the message says why (shown to the page and logged)."""


@dataclass(frozen=True)
class Allowlist:
    """`[browser] allowed_hosts`: names, addresses and networks, each with an optional port."""

    anywhere: AddressPolicy
    with_port: frozenset[tuple[str, int]]

    @classmethod
    def of(cls, entries: Iterable[str]) -> Allowlist:
        plain: list[str] = []
        pairs: set[tuple[str, int]] = set()
        for entry in entries:
            host, port = split_host_port(entry.strip().lower())
            if port is None:
                plain.append(entry)
            else:
                pairs.add((host, port))
        return cls(AddressPolicy.from_entries(plain), frozenset(pairs))

    def refusal(self, host: str, port: int, ip: IPAddress) -> str | None:
        if (host, port) in self.with_port or (str(ip), port) in self.with_port:
            return None
        return self.anywhere.refusal(host, ip)


def split_host_port(text: str) -> tuple[str, int | None]:
    """`host:port`, `[v6]:port`, `10.0.0.0/8` or a bare host → (host, port or None)."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdecimal() else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        if port.isdecimal():
            return host, int(port)
    return text, None


async def _system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class BrowserProxy:
    """An asyncio HTTP proxy on 127.0.0.1 that vets every host (see the module docstring)."""

    def __init__(self, allow: Allowlist, *, resolve: Resolve | None = None) -> None:
        self.allow = allow
        self.resolve = resolve or _system_resolve
        self.port = 0
        self.refused: list[str] = []  # the last refusals, for tests and doctor
        self._server: asyncio.Server | None = None
        self._slots = asyncio.Semaphore(_MAX_CONNECTIONS)
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            async with self._slots:
                await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(_read_head(reader), _HEAD_SECONDS)
        method, target, version, headers = _parse_head(head)
        try:
            if method == b"CONNECT":
                host, port = _authority(target.decode("latin-1"), 443)
                upstream = await self._open(host, port)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await _relay(reader, writer, *upstream)
                return
            host, port, path = _absolute(target.decode("latin-1"))
            upstream = await self._open(host, port)
        except Refused as exc:
            self.refused = [*self.refused[-19:], str(exc)]
            log.info("browser request refused", extra={"reason": str(exc)})
            await _refuse(writer, str(exc))
            return
        up_reader, up_writer = upstream
        up_writer.write(_origin_head(method, path, version, headers))
        await _relay(reader, writer, up_reader, up_writer, fix_response=True)

    async def _open(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host = host.lower().rstrip(".")
        if not host or not 0 < port < 65536:
            raise Refused("the request names no usable host")
        literal = parse_ip(host)
        try:
            found = [str(literal)] if literal else await self.resolve(host, port)
        except OSError:
            raise Refused(f"{host} could not be resolved") from None
        if not found:
            raise Refused(f"{host} has no address")
        for address in found:
            reason = self.allow.refusal(host, port, ipaddress.ip_address(address))
            if reason is not None:
                raise Refused(f"refused: {reason}")
        try:
            return await asyncio.wait_for(asyncio.open_connection(found[0], port), _CONNECT_SECONDS)
        except (OSError, TimeoutError) as exc:
            raise Refused(f"could not connect to {host}:{port} ({type(exc).__name__})") from None


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > _HEAD_LIMIT:
        raise asyncio.LimitOverrunError("request head too long", len(head))
    return head


def _parse_head(head: bytes) -> tuple[bytes, bytes, bytes, list[tuple[bytes, bytes]]]:
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise OSError("malformed request line")
    headers = []
    for line in lines[1:]:
        if b":" in line:
            name, _, value = line.partition(b":")
            headers.append((name.strip(), value.strip()))
    return parts[0], parts[1], parts[2], headers


def _authority(text: str, default: int) -> tuple[str, int]:
    host, port = split_host_port(text)
    return host, port if port is not None else default


def _absolute(target: str) -> tuple[str, int, str]:
    if not target.startswith("http://"):
        raise Refused("only absolute http:// requests and CONNECT go through this proxy")
    rest = target[len("http://") :]
    authority, slash, path = rest.partition("/")
    host, port = _authority(authority.rpartition("@")[2], 80)
    return host, port, slash + path or "/"


def _origin_head(
    method: bytes, path: str, version: bytes, headers: list[tuple[bytes, bytes]]
) -> bytes:
    kept = [f"{n.decode('latin-1')}: {v.decode('latin-1')}" for n, v in headers]
    kept = [h for h, (n, _) in zip(kept, headers, strict=True) if n.lower() not in _HOP_HEADERS]
    lines = [f"{method.decode('latin-1')} {path} {version.decode('latin-1')}", *kept]
    return ("\r\n".join([*lines, "Connection: close", "", ""])).encode("latin-1")


async def _refuse(writer: asyncio.StreamWriter, reason: str) -> None:
    body = f"<!doctype html><title>Refused by agentd</title><p>agentd: {reason}</p>".encode()
    writer.write(
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/html; charset=utf-8\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await asyncio.wait_for(reader.read(65_536), _IDLE_SECONDS):
            writer.write(chunk)
            await writer.drain()
    except (OSError, TimeoutError):
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.write_eof()


async def _response_head_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The upstream's response head with `Connection: close`, then its body as it comes."""
    head = await asyncio.wait_for(_read_head(reader), _IDLE_SECONDS)
    lines = head.split(b"\r\n")
    kept = [
        line
        for line in lines[1:]
        if line and line.partition(b":")[0].strip().lower() not in _HOP_HEADERS
    ]
    writer.write(b"\r\n".join([lines[0], *kept, b"Connection: close", b"", b""]))
    await _pipe(reader, writer)


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    *,
    fix_response: bool = False,
) -> None:
    down = _response_head_closed(up_reader, writer) if fix_response else _pipe(up_reader, writer)
    tasks = [asyncio.ensure_future(_pipe(reader, up_writer)), asyncio.ensure_future(down)]
    try:
        # The response decides: once it ended (or failed), the request side is done too.
        await asyncio.wait([tasks[1]])
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        up_writer.close()
