"""The fetch_url tool: a web page as readable text, marked as untrusted data (R-SP-2)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from pydantic import Field

from agentd.config import FetchConfig
from agentd.net.safe_fetch import FetchedPage, FetchError, FetchPolicy, fetch
from agentd.tools.base import (
    Assessment,
    CallState,
    Tool,
    ToolContext,
    ToolError,
    mark_untrusted,
)
from agentd.tools.citations import heading, source_list, url_id
from agentd.tools.declare import tool
from agentd.tools.policy import OUTSIDE_REASON
from agentd.tools.urls import url_host


def fetch_policy(config: FetchConfig) -> FetchPolicy:
    """The SSRF policy and limits from `[tools.fetch]`."""
    return FetchPolicy(
        allow_private=config.allow_private,
        allowed_hosts=tuple(config.allowed_hosts),
        max_bytes=config.max_bytes,
        timeout=config.timeout,
        max_redirects=config.max_redirects,
    )


def _render(page: FetchedPage, max_chars: int, max_bytes: int) -> str:
    lines = [f"URL: {page.url}", f"Status: {page.status} {page.reason}".rstrip()]
    if page.redirects:
        lines.append(f"Redirected {len(page.redirects)} time(s)")
    lines.append(f"Content-Type: {page.content_type}")
    if page.title:
        lines.append(f"Title: {page.title}")
    text = page.text
    notes = []
    if page.truncated:
        notes.append(f"the page is larger than {max_bytes} bytes; only the start was read")
    if len(text) > max_chars:
        text = text[:max_chars]
        notes.append(f"the text was cut at {max_chars} characters")
    body = "\n".join(lines) + "\n\n" + (text or "(no text)")
    if notes:
        body += "\n\n[Truncated: " + "; ".join(notes) + ".]"
    return body


def assess_fetch(args: Any, state: CallState) -> Assessment | None:
    """With outside content in view, a URL the user did not write, byte for byte, asks the
    owner unless they allowed its host: a page may have told the model to compose it, with
    private data in its path or query. A URL that a result showed earns nothing: which of
    several shown links the model picks can carry data too."""
    if not state.tainted_by or args.url in state.user_urls:
        return None
    host = url_host(args.url)
    if host and host in state.allowed_hosts:
        return Assessment(risk="low", reason=f"the owner allowed fetches from {host}")
    sources = ", ".join(state.tainted_by[:3])
    return Assessment(
        risk="high",
        reason=f"{OUTSIDE_REASON} ({sources}) and the model wants to fetch a "
        "URL you did not write yourself: a page could use such a fetch to send data out",
        allow_host=host,
    )


def fetch_url_tool(policy: FetchPolicy, *, max_chars: int = 40_000) -> Tool:
    """The fetch_url tool bound to an SSRF policy (config in production, fakes in tests)."""

    # A page is outside content (taints); which URLs may be fetched after outside content is
    # its own assessment (a URL the user wrote, an allowed host), not the egress rule.
    @tool(
        name="fetch_url",
        risk="low",
        timeout=policy.timeout + 5,
        taints=True,
        assess=assess_fetch,
    )
    async def fetch_url(
        ctx: ToolContext,
        url: Annotated[str, Field(description="The http or https URL to read", max_length=4096)],
    ) -> str:
        """Fetch a web page or text/JSON document by URL and return its readable text (not
        binary files; private and local network addresses are refused)."""
        # With outside content in view the call was let through for this URL's server (a URL
        # the user wrote, an allowed host, an approved card): an open redirect there must not
        # carry it on to any other.
        bound = replace(policy, stay_on_host=True) if ctx.tainted_by else policy
        try:
            page = await fetch(url, bound)
        except FetchError as exc:
            raise ToolError(f"Could not fetch {url}: {exc}") from None
        sid = url_id("U", page.url)
        page_text = _render(page, max_chars, policy.max_bytes)
        untrusted = mark_untrusted(f"{heading(sid, page.title or page.url)}\n{page_text}", page.url)
        cited = source_list([(sid, page.url)])
        return f"{untrusted}\n\n{cited}"

    return fetch_url
