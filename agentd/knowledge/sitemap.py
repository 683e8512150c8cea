"""Sitemaps (sitemaps.org): a `<urlset>` of pages or a `<sitemapindex>` of more sitemaps.

Fetched through safe_fetch like any page. XML with a DTD is refused (entity expansion is the
classic XML bomb, and sitemaps never need one); gzip-compressed sitemaps are inflated up to the
fetch policy's byte limit.
"""

from __future__ import annotations

import zlib
from collections import deque
from dataclasses import dataclass, field
from xml.etree import ElementTree

from agentd.net.safe_fetch import FetchError, FetchPolicy, fetch_raw

# A sitemap index may point to more indexes; real sites nest one level, this allows three.
MAX_DEPTH = 3
MAX_SITEMAPS = 100


class SitemapError(Exception):
    """A sitemap could not be read; the message says why."""


@dataclass(frozen=True)
class Problem:
    source: str
    reason: str


@dataclass
class SitemapUrls:
    """The pages found, what went wrong on the way, and whether the listing is complete (only
    then may pages missing from it be deleted)."""

    urls: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.problems


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _inflate(body: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise SitemapError(f"broken gzip data ({exc})") from None
    if len(data) > limit:
        raise SitemapError(f"larger than {limit} bytes once decompressed")
    return data


class _DtdRefused(Exception):
    pass


class _NoDtdBuilder(ElementTree.TreeBuilder):
    """The parser calls `doctype` as a DTD begins, before any entity in it is declared."""

    def doctype(self, *_: object) -> None:
        raise _DtdRefused


def parse_sitemap(body: bytes, *, max_bytes: int = 50_000_000) -> tuple[str, list[str]]:
    """("urlset" | "sitemapindex", the <loc> of each entry) of a sitemap document."""
    if body[:2] == b"\x1f\x8b":
        body = _inflate(body, max_bytes)
    # The parser itself refuses the DTD: a byte search misses one in UTF-16, or past a long
    # comment before it.
    parser = ElementTree.XMLParser(target=_NoDtdBuilder())
    try:
        parser.feed(body)
        root = parser.close()
    except _DtdRefused:
        raise SitemapError("XML with a DTD is not read") from None
    except ElementTree.ParseError as exc:
        raise SitemapError(f"not valid XML ({exc})") from None
    kind = _local(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        raise SitemapError(f"not a sitemap (the root element is <{kind}>)")
    namespace = root.tag[: -len(kind)]  # "{http://www.sitemaps.org/schemas/sitemap/0.9}" or ""
    entry = "url" if kind == "urlset" else "sitemap"
    locs = []
    # Only <url><loc> of the sitemap's own namespace: image and video extensions add <loc>s too.
    for element in root.findall(f"{namespace}{entry}"):
        loc = element.find(f"{namespace}loc")
        if loc is not None and loc.text and loc.text.strip():
            locs.append(loc.text.strip())
    return kind, locs


def sitemap_job(data: bytes) -> list[object]:
    """The child-process side of parse_sitemap_bounded."""
    kind, locs = parse_sitemap(data)
    return [kind, locs]


async def parse_sitemap_bounded(body: bytes) -> tuple[str, list[str]]:
    """parse_sitemap in a bounded child: a gzip bomb or a huge XML file stays off the loop."""
    from agentd.parsing.bounded import run_bounded
    from agentd.parsing.budget import Budget, ParseFailed

    try:
        kind, locs = await run_bounded(
            "agentd.knowledge.sitemap:sitemap_job", body, Budget(seconds=60, cpu_seconds=30)
        )
    except ParseFailed as exc:
        raise SitemapError(str(exc)) from None
    return str(kind), [str(loc) for loc in locs]


async def sitemap_urls(url: str, policy: FetchPolicy, *, max_urls: int) -> SitemapUrls:
    """The page URLs of a sitemap, following sitemap indexes; the first sitemap failing raises
    (nothing to ingest), a nested one failing is a problem in the result."""
    found = SitemapUrls()
    seen_pages: set[str] = set()
    seen_maps = {url}
    queue: deque[tuple[str, int]] = deque([(url, 0)])
    while queue:
        current, depth = queue.popleft()
        try:
            raw = await fetch_raw(current, policy)
            if raw.status >= 400:
                raise SitemapError(f"HTTP {raw.status} {raw.reason}".rstrip())
            if raw.truncated:
                raise SitemapError(f"larger than {policy.max_bytes} bytes (tools.fetch.max_bytes)")
            kind, locs = await parse_sitemap_bounded(raw.body)
        except (SitemapError, FetchError) as exc:
            if current == url:
                raise
            found.problems.append(Problem(current, f"sitemap: {exc}"))
            continue
        if kind == "sitemapindex":
            for loc in locs:
                if loc in seen_maps:
                    continue
                if depth + 1 > MAX_DEPTH or len(seen_maps) >= MAX_SITEMAPS:
                    found.problems.append(
                        Problem(loc, "sitemap: not read (too many or too deeply nested sitemaps)")
                    )
                    continue
                seen_maps.add(loc)
                queue.append((loc, depth + 1))
            continue
        for loc in locs:
            if loc in seen_pages:
                continue
            if len(found.urls) >= max_urls:
                found.problems.append(
                    Problem(
                        url,
                        f"more than {max_urls} pages listed; the rest were not read "
                        "(docs.max_urls)",
                    )
                )
                return found
            seen_pages.add(loc)
            found.urls.append(loc)
    return found
