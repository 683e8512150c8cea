"""A small local web site for document ingestion: HTML pages, a sitemap, a sitemap index, 404s.

Pages live in `pages` (path -> Page) and may be edited or deleted between ingests; the sitemap
lists every page unless `sitemap_paths` says otherwise, so a deleted page drops out of it.

    async with FakeSite.serving() as site:
        site.page("/guide", "<h1>Guide</h1><p>…</p>", title="Guide")
        await ingest(..., sitemap=site.url("/sitemap.xml"), policy=site.policy())
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from aiohttp import web

from agentd.net.safe_fetch import FetchPolicy
from tests.fakes._server import FakeServer

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


@dataclass
class Page:
    body: bytes
    content_type: str = "text/html"
    status: int = 200


class FakeSite(FakeServer):
    """Serves `pages`, /sitemap.xml (a urlset), /sitemap_index.xml, an open redirect at /go and
    404 for the rest."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pages: dict[str, Page] = {}
        self.sitemap_paths: list[str] | None = None  # None: every page
        self.requests: list[str] = []

    # -- content ------------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return self.base_url + path

    def page(self, path: str, body_html: str, *, title: str = "", status: int = 200) -> str:
        """Add or replace an HTML page; returns its URL."""
        head = f"<title>{escape(title)}</title>" if title else ""
        html = f"<!doctype html><html><head>{head}</head><body>{body_html}</body></html>"
        with self._lock:
            self.pages[path] = Page(html.encode(), "text/html; charset=utf-8", status)
        return self.url(path)

    def raw(self, path: str, body: bytes, content_type: str, status: int = 200) -> str:
        with self._lock:
            self.pages[path] = Page(body, content_type, status)
        return self.url(path)

    def remove(self, path: str) -> None:
        with self._lock:
            self.pages.pop(path, None)

    def policy(self, **overrides: Any) -> FetchPolicy:
        """A fetch policy that lets safe_fetch reach this loopback server (and nothing else)."""
        return FetchPolicy(allowed_hosts=(self.host,), **{"timeout": 5.0, **overrides})

    def sitemap_xml(self, paths: list[str] | None = None) -> bytes:
        with self._lock:
            listed = paths if paths is not None else self.sitemap_paths
            listed = list(self.pages) if listed is None else listed
        urls = "".join(f"<url><loc>{escape(self.url(p))}</loc></url>" for p in listed)
        return (
            f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{SITEMAP_NS}">{urls}</urlset>'
        ).encode()

    def sitemap_index_xml(self, sitemaps: list[str]) -> bytes:
        entries = "".join(f"<sitemap><loc>{escape(self.url(p))}</loc></sitemap>" for p in sitemaps)
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>'
            f'<sitemapindex xmlns="{SITEMAP_NS}">{entries}</sitemapindex>'
        ).encode()

    # -- server -------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/sitemap.xml", self._sitemap)
        app.router.add_get("/sitemap_index.xml", self._sitemap_index)
        app.router.add_get("/go", self._open_redirect)
        app.router.add_get("/{tail:.*}", self._page)

    async def _open_redirect(self, request: web.Request) -> web.Response:
        """An open redirect, as many sites have one: /go?to=URL answers 302 to URL."""
        self._record(request)
        raise web.HTTPFound(request.query.get("to", "/"))

    async def _sitemap(self, request: web.Request) -> web.Response:
        self._record(request)
        return web.Response(body=self.sitemap_xml(), content_type="application/xml")

    async def _sitemap_index(self, request: web.Request) -> web.Response:
        self._record(request)
        body = self.sitemap_index_xml(["/sitemap.xml", "/missing-sitemap.xml"])
        return web.Response(body=body, content_type="application/xml")

    async def _page(self, request: web.Request) -> web.Response:
        self._record(request)
        with self._lock:
            page = self.pages.get(request.path)
        if page is None:
            return web.Response(status=404, text="not found")
        return web.Response(
            status=page.status, body=page.body, headers={"Content-Type": page.content_type}
        )

    def _record(self, request: web.Request) -> None:
        with self._lock:
            self.requests.append(request.path)
            self._changed()

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> None:
        return None


if __name__ == "__main__":
    FakeSite.main()
