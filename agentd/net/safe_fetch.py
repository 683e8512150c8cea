"""SSRF-safe HTTP GET: every hop's addresses are vetted, and the connection goes to them.

The check happens inside aiohttp's resolver, so the address that was vetted is the address
that is connected to: a DNS answer that changes between check and connect (rebinding) cannot
slip through. IP-literal hosts skip aiohttp's resolver and are checked on every hop here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from agentd.net.addresses import AddressPolicy, parse_ip
from agentd.net.bodies import Arrived, read_at_most
from agentd.net.html_text import HtmlTooHard, html_to_text_bounded

# (host, port) -> IP address strings. The default asks the system (getaddrinfo); tests
# inject a fake so a local server can stand in for a public one.
Resolve = Callable[[str, int], Awaitable[list[str]]]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*\.?$", re.IGNORECASE)
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/x-ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-www-form-urlencoded",
    }
)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([a-zA-Z0-9_.:-]+)""", re.IGNORECASE)


class FetchError(Exception):
    """The URL could not be fetched; the message says why, in words fit for the model."""


class UrlRefused(FetchError):
    """The URL or an address it leads to is not allowed (scheme, private address, …)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason


class UnsupportedContent(FetchError):
    """The response is binary (or another type the caller does not read)."""

    def __init__(self, message: str, content_type: str) -> None:
        super().__init__(message)
        self.content_type = content_type


@dataclass(frozen=True)
class FetchPolicy:
    """What a fetch may reach and how much it may read. The defaults refuse private networks."""

    allow_private: bool = False
    allowed_hosts: tuple[str, ...] = ()
    max_bytes: int = 2_000_000
    timeout: float = 20.0
    max_redirects: int = 5
    # Follow a redirect only to the server the fetch started on: what a turn with outside
    # content in view was allowed to reach is that server, not wherever it points next.
    stay_on_host: bool = False
    # Never follow a redirect from https down to http (what is read, or a password sent to
    # the first address, would then cross the network in the clear).
    keep_https: bool = False
    user_agent: str = "agentd-fetch/0.1"
    resolve: Resolve | None = field(default=None, compare=False)

    @cached_property
    def addresses(self) -> AddressPolicy:
        return AddressPolicy.from_entries(self.allowed_hosts, allow_private=self.allow_private)


@dataclass(frozen=True)
class RawResponse:
    url: str
    status: int
    reason: str
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool
    redirects: tuple[str, ...] = ()


@dataclass(frozen=True)
class FetchedPage:
    url: str
    status: int
    reason: str
    content_type: str
    title: str
    text: str
    truncated: bool
    bytes_read: int
    redirects: tuple[str, ...] = ()


async def _system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _VettingResolver(AbstractResolver):
    """Resolves through the policy's resolver and refuses the host if any address is barred."""

    def __init__(self, policy: FetchPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await (self._policy.resolve or _system_resolve)(host, port)
        results: list[ResolveResult] = []
        for address in addresses:
            ip = ipaddress.ip_address(address)
            # Refuse the whole host, not just the bad address: a name that mixes public and
            # private answers is a rebinding setup more often than a real service.
            reason = self._policy.addresses.refusal(host, ip)
            if reason is not None:
                raise UrlRefused(reason)
            ip_family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            if family not in (0, socket.AF_UNSPEC, ip_family):
                continue
            results.append(
                ResolveResult(
                    hostname=host,
                    host=str(ip),
                    port=port,
                    family=ip_family,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            )
        if not results:
            raise OSError(f"{host} has no usable address")
        return results

    async def close(self) -> None:
        return None


def check_url(url: str | URL, policy: FetchPolicy) -> URL:
    """Parse and vet what can be vetted without DNS: scheme, credentials, IP-literal hosts."""
    try:
        parsed = url if isinstance(url, URL) else URL(url.strip())
    except (ValueError, TypeError) as exc:
        raise UrlRefused(f"not a valid URL ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        shown = parsed.scheme or "no scheme"
        raise UrlRefused(f"only http and https URLs can be fetched, not {shown}")
    host = parsed.host
    if not host:
        raise UrlRefused("the URL has no host")
    if parsed.user or parsed.password:
        raise UrlRefused("URLs with a user name or password are not fetched")
    ip = parse_ip(host)
    if ip is None and _NUMERIC_HOST.match(host):
        # 2130706433, 0x7f.1 and 127.1 all mean 127.0.0.1 to some resolvers.
        raise UrlRefused(f"{host} is not a canonical IP address")
    if ip is not None:
        reason = policy.addresses.refusal(str(ip), ip)
        if reason is not None:
            raise UrlRefused(reason)
    return parsed


def _describe(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "the host name could not be resolved"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"could not connect ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, aiohttp.TooManyRedirects):
        return "too many redirects"
    return str(exc) or type(exc).__name__


class RedirectRefused(FetchError):
    """A redirect to another server, refused under `stay_on_host`."""


def _server(url: URL) -> str:
    """The server a URL reaches as a host rule names it: host, and a port not the scheme's."""
    host = (url.host or "").lower()
    default = {"http": 80, "https": 443}.get(url.scheme.lower())
    return host if url.port in (None, default) else f"{host}:{url.port}"


def _origin(url: URL) -> tuple[str, str, int | None]:
    return url.scheme.lower(), (url.host or "").lower(), url.port


def _keep_https(current: URL, target: URL, policy: FetchPolicy) -> None:
    if policy.keep_https and (current.scheme, target.scheme) == ("https", "http"):
        raise RedirectRefused(
            f"{current} redirected to {target}, from https down to plain "
            "http; not followed. Use the https address it should have."
        )


# (host, port) -> IP address strings, blocking: for HTTP clients that run in a thread.
SyncResolve = Callable[[str, int], list[str]]


def system_resolve_sync(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class RedirectVetter:
    """For an HTTP client that follows redirects itself (python-caldav's niquests session, as
    its `response` hook): each redirect off the first URL's origin is vetted as `fetch_raw`
    vets one (https kept, the scheme, every address its host resolves to, through `vet`)
    before it is followed, so the refusal names the redirect. What guarantees the connection
    goes only to a vetted address is the session's resolver (`agentd.net.pinned`), whose
    `vetted` is `vet`: a DNS answer changed since this check is vetted again at the connect.
    A refusal raises UrlRefused or RedirectRefused."""

    def __init__(self, url: str, policy: FetchPolicy, vet: Callable[[str, int], object]) -> None:
        self._home = _origin(URL(url))
        self._policy = policy
        self._vet = vet

    def __call__(self, response: Any, **_kwargs: Any) -> Any:
        location = response.headers.get("Location")
        if response.status_code in _REDIRECTS and location:
            here = URL(str(response.url))
            self._vet_target(here, here.join(URL(location)))
        return response

    def _vet_target(self, here: URL, target: URL) -> None:
        if _origin(target) == self._home:
            return
        _keep_https(here, target, self._policy)
        try:
            check_url(target, self._policy)
            self._vet(target.host or "", target.port or 0)
        except UrlRefused as exc:
            raise UrlRefused(f"redirected to {target}, and {exc.reason}") from None


async def _get(
    url: str,
    policy: FetchPolicy,
    accept: Callable[[str], bool] | None,
    authorization: str | None,
    arrived: Arrived,
) -> RawResponse:
    current = check_url(url, policy)
    home = _origin(current)
    redirects: list[str] = []
    connector = aiohttp.TCPConnector(
        resolver=_VettingResolver(policy), use_dns_cache=False, force_close=True
    )
    # trust_env=False: an HTTP(S)_PROXY would resolve names itself, out of our reach.
    async with aiohttp.ClientSession(
        connector=connector,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        headers={"User-Agent": policy.user_agent, "Accept": "text/html,text/*;q=0.9,*/*;q=0.5"},
    ) as session:
        while True:
            try:
                # The credentials go to the first URL's origin only, never along a redirect
                # to another server, port or scheme.
                on_home = authorization and _origin(current) == home
                sent = {"Authorization": authorization} if on_home else {}
                arrived.answered, arrived.body_bytes = False, 0  # this hop's server
                async with session.get(current, allow_redirects=False, headers=sent) as resp:
                    arrived.answered = True
                    location = resp.headers.get("Location")
                    if resp.status in _REDIRECTS and location:
                        if len(redirects) >= policy.max_redirects:
                            raise FetchError(f"more than {policy.max_redirects} redirects")
                        target = current.join(URL(location))
                        redirects.append(str(target))
                        if policy.stay_on_host and _server(target) != _server(current):
                            raise RedirectRefused(
                                f"{_server(current)} redirected to {target}, another server: "
                                "with outside content in view a fetch does not follow a "
                                "redirect off the server it started on. Fetch that URL itself "
                                "if it is needed (it asks the owner first unless its host is "
                                "allowed)."
                            )
                        _keep_https(current, target, policy)
                        current = check_url(target, policy)
                        continue
                    content_type = resp.content_type if "Content-Type" in resp.headers else ""
                    if accept is not None and not accept(content_type):
                        raise UnsupportedContent(
                            f"{current} is {content_type} content, which is not read", content_type
                        )
                    body = await read_at_most(resp.content, policy.max_bytes + 1, arrived)
                    body, truncated = body[: policy.max_bytes], len(body) > policy.max_bytes
                    return RawResponse(
                        url=str(current),
                        status=resp.status,
                        reason=resp.reason or "",
                        content_type=content_type,
                        charset=resp.charset,
                        body=body,
                        truncated=truncated,
                        redirects=tuple(redirects),
                    )
            except UrlRefused as exc:
                if not redirects:
                    raise
                # Say where the refusal happened: the model only asked for the first URL.
                raise UrlRefused(f"redirected to {redirects[-1]}, and {exc.reason}") from None
            except aiohttp.ClientError as exc:
                raise FetchError(f"could not fetch {current.host}: {_describe(exc)}") from None


async def fetch_raw(
    url: str,
    policy: FetchPolicy,
    *,
    accept: Callable[[str], bool] | None = None,
    authorization: str | None = None,
) -> RawResponse:
    """GET `url` under `policy`, following vetted redirects; the body stops at max_bytes,
    the whole exchange at `policy.timeout`.

    `accept(content_type)` may refuse a response before its body is read; `authorization` (an
    Authorization header's value) is sent to `url`'s own scheme, host and port only.
    """
    arrived = Arrived()
    try:
        async with asyncio.timeout(policy.timeout):
            return await _get(url, policy, accept, authorization, arrived)
    except TimeoutError:
        raise FetchError(
            f"no complete answer within {policy.timeout:g} s ({arrived.said()})"
        ) from None


def is_textual(content_type: str) -> bool:
    """True for HTML, text/*, JSON, XML and friends (and an unknown type, sniffed later)."""
    ct = content_type.lower()
    return (
        not ct
        or ct.startswith("text/")
        or ct in _HTML_TYPES
        or ct in _TEXT_TYPES
        or ct.endswith(("+json", "+xml"))
    )


def decode_text(raw: RawResponse, html: bool) -> str:
    """The body as text: the declared charset, an HTML meta charset, else UTF-8 (lenient)."""
    charset = raw.charset
    if charset is None and html:
        found = _META_CHARSET.search(raw.body[:4096])
        charset = found.group(1).decode("ascii") if found else None
    try:
        return raw.body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return raw.body.decode("utf-8", errors="replace")


async def fetch(url: str, policy: FetchPolicy) -> FetchedPage:
    """Fetch a page as readable text: HTML converted, text and JSON passed through.

    Raises UrlRefused, UnsupportedContent (binary) or FetchError, each with a clear message.
    """
    raw = await fetch_raw(url, policy, accept=is_textual)
    content_type = raw.content_type
    if not content_type:
        head = raw.body[:1024]
        if b"\x00" in head:
            raise UnsupportedContent(f"{raw.url} looks like binary content", "")
        content_type = "text/html" if b"<html" in head.lower() else "text/plain"
    is_html = content_type in _HTML_TYPES
    text = decode_text(raw, is_html)
    title = ""
    if is_html:
        # Off the event loop and bounded: the page is hostile until proven otherwise.
        try:
            page = await html_to_text_bounded(text)
        except HtmlTooHard as exc:
            raise FetchError(f"{raw.url}: {exc}") from None
        title, text = page.title, page.text
    return FetchedPage(
        url=raw.url,
        status=raw.status,
        reason=raw.reason,
        content_type=content_type,
        title=title,
        text=text,
        truncated=raw.truncated,
        bytes_read=len(raw.body),
        redirects=raw.redirects,
    )
