"""Outgoing HTTP that cannot be turned against the owner's own network (SSRF-safe)."""

from agentd.net.addresses import AddressPolicy, blocked_reason
from agentd.net.html_text import HtmlText, html_to_text
from agentd.net.safe_fetch import (
    FetchedPage,
    FetchError,
    FetchPolicy,
    RawResponse,
    UnsupportedContent,
    UrlRefused,
    check_url,
    fetch,
    fetch_raw,
    is_textual,
)

__all__ = [
    "AddressPolicy",
    "FetchError",
    "FetchPolicy",
    "FetchedPage",
    "HtmlText",
    "RawResponse",
    "UnsupportedContent",
    "UrlRefused",
    "blocked_reason",
    "check_url",
    "fetch",
    "fetch_raw",
    "html_to_text",
    "is_textual",
]
