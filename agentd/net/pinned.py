"""A niquests session (python-caldav's HTTP client) that connects only to addresses vetted
for their host: the vetting happens inside the session's DNS resolver (the extension point
niquests and urllib3-future document: a `BaseResolver` passed as `resolver=`), so the address
vetted is the address connected to. A DNS answer that changes between a check and the connect
(rebinding a redirect's host to a private address) cannot slip through. The resolver only
says where to connect: TLS still verifies the certificate against the URL's host name.

Blocking, like the client it serves: for code that runs in a thread.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import niquests
from niquests.packages.urllib3.contrib.resolver import BaseResolver
from yarl import URL

from agentd.net.addresses import IPAddress, parse_ip
from agentd.net.safe_fetch import (
    FetchError,
    FetchPolicy,
    RedirectVetter,
    SyncResolve,
    UrlRefused,
    system_resolve_sync,
)

# What socket.getaddrinfo returns: family, type, proto, canonical name, socket address.
_AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[Any, ...]]


class VettingResolver(BaseResolver):
    """Resolves through `resolve` (the system's by default; tests answer for a name of their
    own) and refuses a host when any of its addresses is barred by `policy`, as the safe
    fetch's resolver does for aiohttp."""

    def __init__(self, policy: FetchPolicy, resolve: SyncResolve = system_resolve_sync) -> None:
        super().__init__(None, None)
        self._policy = policy
        self._resolve = resolve
        self._open = True

    def vetted(self, host: str, port: int) -> list[IPAddress]:
        """`host`'s addresses, each allowed by the policy; UrlRefused names the first barred.
        A whole host is refused, not just its bad address: a name that mixes public and
        private answers is a rebinding setup more often than a real service."""
        literal = parse_ip(host)
        found = (
            [literal] if literal else [ipaddress.ip_address(a) for a in self._resolve(host, port)]
        )
        for ip in found:
            reason = self._policy.addresses.refusal(host, ip)
            if reason is not None:
                raise UrlRefused(reason)
        return found

    def getaddrinfo(
        self,
        host: bytes | str | None,
        port: str | int | None,
        family: socket.AddressFamily,
        type: socket.SocketKind,
        proto: int = 0,
        flags: int = 0,
        *,
        quic_upgrade_via_dns_rr: bool = False,
    ) -> list[_AddrInfo]:
        name = host.decode("ascii") if isinstance(host, bytes) else host or "localhost"
        number = int(port or 0)
        found: list[_AddrInfo] = []
        for ip in self.vetted(name, number):
            ip_family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            if family not in (socket.AF_UNSPEC, ip_family):
                continue
            where = (str(ip), number, 0, 0) if ip.version == 6 else (str(ip), number)
            found.append((ip_family, type or socket.SOCK_STREAM, proto, "", where))
        if not found:
            raise socket.gaierror(f"{name} has no address of the family asked for")
        return found

    def recycle(self) -> BaseResolver:
        return VettingResolver(self._policy, self._resolve)

    def close(self) -> None:
        self._open = False

    def is_available(self) -> bool:
        return self._open


def origin(url: URL) -> str:
    """scheme://host:port, the port written even when it is the scheme's."""
    host = f"[{url.host}]" if ":" in (url.host or "") else url.host or ""
    return f"{url.scheme.lower()}://{host.lower()}:{url.port}"


class OffOrigin(FetchError):
    """The client was about to ask another origin (scheme, host, port) than its own, with
    the login it holds for its own: nothing was sent."""

    def __init__(self, target: str, home: str) -> None:
        super().__init__(f"{target} is on {origin(URL(target))}, not {home}")
        self.target = target
        self.home = home


class _OneOrigin(niquests.Session):
    """A session whose requests all go to one origin. A client that holds a login sends it
    with every request it makes (python-caldav moves to whatever host a server names for the
    calendars, login and all): one for another origin is refused before it is made. A
    redirect is not such a request: the session follows it only once vetted, and drops the
    login when it leaves the host."""

    def __init__(self, home: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._home = origin(URL(home))

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
        if origin(URL(str(url))) != self._home:
            raise OffOrigin(str(url), self._home)
        return super().request(method, url, *args, **kwargs)


def pinned_session(
    url: str, policy: FetchPolicy, resolve: SyncResolve = system_resolve_sync
) -> niquests.Session:
    """A session for `url` (whose own host `policy` allows) that asks only `url`'s origin
    (`OffOrigin` otherwise), connects only where `policy` allows, follows a redirect off
    `url`'s origin only once it is vetted (https kept), and reads nothing from the
    environment: a proxy there would resolve names itself, out of the resolver's reach, and
    a .netrc would add logins for hosts a redirect names."""
    resolver = VettingResolver(policy, resolve)
    session = _OneOrigin(url, resolver=resolver)
    session.trust_env = False
    session.hooks["response"].append(RedirectVetter(url, policy, resolver.vetted))
    return session
