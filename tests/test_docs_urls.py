"""URL lists and sitemaps through the SSRF-safe fetcher, against a local fake site."""

from __future__ import annotations

import gzip
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentd.config import DocsConfig
from agentd.db.runner import ConnRunner
from agentd.knowledge.ingest import ingest
from agentd.knowledge.search import search
from agentd.knowledge.sitemap import SitemapError, parse_sitemap
from agentd.knowledge.store import list_documents
from agentd.net.safe_fetch import FetchPolicy
from tests.docs_support import CountingEmbedder, make_pdf, open_store
from tests.fakes.site import FakeSite


@pytest.fixture
def conn(tmp_path: Path) -> Any:
    c = open_store(tmp_path / "docs.db")
    yield c
    c.close()


@pytest.fixture
async def site() -> AsyncIterator[FakeSite]:
    async with FakeSite.serving() as fake:
        fake.page(
            "/guide",
            "<h1>Guide</h1><h2>Setup</h2><p>Plug the zebra router in.</p>",
            title="Router guide",
        )
        fake.page(
            "/faq",
            "<h1>FAQ</h1><h2>Reset</h2><p>Hold the reset pin for ten seconds.</p>",
            title="Router FAQ",
        )
        yield fake


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/gone"


async def test_sitemap_ingest_reports_a_404_and_goes_on(conn: Any, site: FakeSite) -> None:
    site.sitemap_paths = ["/guide", "/faq", "/missing"]
    report = await ingest(
        ConnRunner(conn),
        CountingEmbedder(),
        DocsConfig(),
        sitemap=site.url("/sitemap.xml"),
        policy=site.policy(),
    )
    assert sorted(report.added) == [site.url("/faq"), site.url("/guide")]
    assert [(f.source, f.reason) for f in report.failed] == [
        (site.url("/missing"), "HTTP 404 Not Found")
    ]
    hit = search(conn, "reset pin", mode="keyword")[0]
    assert (hit.title, hit.section, hit.source, hit.kind) == (
        "Router FAQ",
        "Reset",
        site.url("/faq"),
        "url",
    )


async def test_pages_gone_from_the_sitemap_are_removed(conn: Any, site: FakeSite) -> None:
    embedder = CountingEmbedder()
    run = dict(sitemap=site.url("/sitemap.xml"), policy=site.policy())
    await ingest(ConnRunner(conn), embedder, DocsConfig(), **run)  # type: ignore[arg-type]
    site.page(
        "/guide",
        "<h1>Guide</h1><h2>Setup</h2><p>Plug the zebra router in.</p>"
        "<h2>Lights</h2><p>Green means online.</p>",
        title="Router guide",
    )
    site.remove("/faq")
    embedder.calls.clear()
    report = await ingest(ConnRunner(conn), embedder, DocsConfig(), **run)  # type: ignore[arg-type]
    assert report.changed == [site.url("/guide")] and report.removed == [site.url("/faq")]
    assert embedder.embedded == 1  # only the new "Lights" chunk
    assert [d.source for d in list_documents(conn)] == [site.url("/guide")]


async def test_a_sitemap_index_with_a_broken_child_removes_nothing(
    conn: Any, site: FakeSite
) -> None:
    policy = site.policy()
    await ingest(
        ConnRunner(conn),
        CountingEmbedder(),
        DocsConfig(),
        sitemap=site.url("/sitemap_index.xml"),
        policy=policy,
    )
    site.remove("/faq")  # gone from /sitemap.xml, but /missing-sitemap.xml is unreadable
    report = await ingest(
        ConnRunner(conn),
        CountingEmbedder(),
        DocsConfig(),
        sitemap=site.url("/sitemap_index.xml"),
        policy=policy,
    )
    assert report.removed == []
    assert [f.source for f in report.failed] == [site.url("/missing-sitemap.xml")]
    docs = {d.source: d for d in list_documents(conn)}
    assert len(docs) == 2  # the page gone from the sitemap is kept, but marked
    faq = docs[site.url("/faq")]
    assert faq.status == "stale" and "could be read" in (faq.error or "")
    assert [d.status for s, d in docs.items() if s != site.url("/faq")] == ["ingested"]


async def test_url_list_with_unreachable_refused_and_binary(
    conn: Any, site: FakeSite, tmp_path: Path
) -> None:
    site.raw("/logo.png", b"\x89PNG\r\n\x1a\n", "image/png")
    site.raw("/notes.md", b"# Notes\n\n## Todo\n\nWater the plants.", "text/plain")
    gone = _closed_port_url()
    urls = tmp_path / "urls.txt"
    urls.write_text(
        f"# my reading list\n{site.url('/guide')}\n\n{gone}\n{site.url('/notes.md')}\n"
        f"{site.url('/logo.png')}\nfile:///etc/passwd\n{site.url('/guide')}\n"
    )
    report = await ingest(
        ConnRunner(conn),
        CountingEmbedder(),
        DocsConfig(fetch_concurrency=2),
        url_file=urls,
        policy=site.policy(),
    )
    assert report.added == [site.url("/guide"), site.url("/notes.md")]
    reasons = {f.source: f.reason for f in report.failed}
    assert "could not connect" in reasons[gone]
    assert "image/png" in reasons[site.url("/logo.png")]
    assert "only http and https" in reasons["file:///etc/passwd"]
    hit = search(conn, "water plants", mode="keyword")[0]
    assert (hit.title, hit.section) == ("Notes", "Todo")  # .md served as text/plain

    urls.write_text(site.url("/guide") + "\n")  # dropped from the list: removed
    report = await ingest(
        ConnRunner(conn), CountingEmbedder(), DocsConfig(), url_file=urls, policy=site.policy()
    )
    # The ones that failed were listed (as failed) too, so they go as well.
    dropped = {site.url("/notes.md"), gone, site.url("/logo.png"), "file:///etc/passwd"}
    assert set(report.removed) == dropped and report.unchanged == [site.url("/guide")]


async def test_a_pdf_url(conn: Any, site: FakeSite) -> None:
    pytest.importorskip("pypdf")
    pdf = site.raw("/manual.pdf", make_pdf(["Router manual page one."]), "application/pdf")
    report = await ingest(
        ConnRunner(conn),
        CountingEmbedder(),
        DocsConfig(),
        sitemap=site.url("/sitemap.xml"),
        policy=site.policy(),
    )
    assert pdf in report.added and report.failed == []
    assert search(conn, "router manual", mode="keyword")[0].section == "Page 1"


async def test_the_default_policy_refuses_private_addresses(conn: Any, site: FakeSite) -> None:
    report = await ingest(
        ConnRunner(conn),
        CountingEmbedder(),
        DocsConfig(),
        sitemap=site.url("/sitemap.xml"),
        policy=FetchPolicy(),
    )
    assert report.added == [] and "refused" in report.failed[0].reason
    assert site.requests == []  # nothing reached the server


async def test_max_urls_caps_a_sitemap(conn: Any, site: FakeSite) -> None:
    for i in range(5):
        site.page(f"/p{i}", f"<p>Page {i}</p>")
    report = await ingest(
        ConnRunner(conn),
        CountingEmbedder(),
        DocsConfig(max_urls=3),
        sitemap=site.url("/sitemap.xml"),
        policy=site.policy(),
    )
    assert len(report.added) == 3
    assert "more than 3 pages" in report.failed[0].reason


def test_parse_sitemap_forms() -> None:
    ns = "http://www.sitemaps.org/schemas/sitemap/0.9"
    body = (
        f'<urlset xmlns="{ns}" xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">'
        "<url><loc> https://a.example/1 </loc><image:image><image:loc>https://a.example/i.png"
        "</image:loc></image:image></url><url><loc>https://a.example/2</loc></url></urlset>"
    ).encode()
    assert parse_sitemap(body) == ("urlset", ["https://a.example/1", "https://a.example/2"])
    assert parse_sitemap(gzip.compress(body))[1] == ["https://a.example/1", "https://a.example/2"]
    index = b"<sitemapindex><sitemap><loc>https://a.example/s.xml</loc></sitemap></sitemapindex>"
    assert parse_sitemap(index) == ("sitemapindex", ["https://a.example/s.xml"])
    bomb = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><urlset>&a;</urlset>'
    for bad, message in (
        (bomb, "DTD"),
        (b"<html></html>", "not a sitemap"),
        (b"<urlset", "not valid XML"),
        (b"\x1f\x8bxx", "gzip"),
    ):
        with pytest.raises(SitemapError, match=message):
            parse_sitemap(bad)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8"])
def test_a_sitemaps_dtd_is_refused_however_it_is_spelled(encoding: str) -> None:
    """In UTF-16 no byte reads `<!DOCTYPE`, and a long comment can push it past any prefix a
    byte search looks at; the parser itself sees every DTD."""
    ns = "http://www.sitemaps.org/schemas/sitemap/0.9"
    doc = (
        f'<?xml version="1.0" encoding="{encoding.upper()}"?><!-- {"c" * 5000} -->'
        '<!DOCTYPE urlset SYSTEM "http://169.254.169.254/latest/meta-data/">'
        f'<urlset xmlns="{ns}"><url><loc>https://a.example/1</loc></url></urlset>'
    )
    with pytest.raises(SitemapError, match="DTD"):
        parse_sitemap(doc.encode(encoding))
