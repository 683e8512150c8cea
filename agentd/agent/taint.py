"""Which outside content a turn has read so far, and which URLs it has seen.

A turn is tainted once the model has read anything it did not get from its user's own words:
a fetched page or search results (a tool with `taints`), a document or photo sent in chat, a
forwarded message or audio (someone else's words), memories recalled from earlier turns, or a
scheduled task that something other than the user set up. From then on, a tool with `egress`
asks the owner (tools/policy.py), and `fetch_url` asks for a URL it has not seen.

Everything here is computed from the turn's input and its journaled step results (the
recall, the media, each tool's Route and outcome, each model response), never from the live
registry: a replay after a crash reaches the same taint at the same call.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from agentd.chat.inputs import TurnInput
from agentd.tools.urls import urls_in

# Enough to show the owner where a turn's taint came from without flooding the card.
_MAX_SOURCES = 20
_MAX_URLS = 2000


class TurnTaint(BaseModel):
    """The outside content read so far in a turn (`sources`) and the URLs seen (`urls`)."""

    sources: list[str] = Field(default_factory=list)
    urls: list[str] = Field(default_factory=list)

    def add_source(self, source: str) -> None:
        if source not in self.sources and len(self.sources) < _MAX_SOURCES:
            self.sources.append(source)

    def add_urls(self, urls: Iterable[str]) -> None:
        known = set(self.urls)
        for url in urls:
            if url not in known and len(self.urls) < _MAX_URLS:
                self.urls.append(url)
                known.add(url)

    @property
    def tainted_by(self) -> tuple[str, ...]:
        return tuple(self.sources)


def turn_taint(
    inp: TurnInput, *, photos: int, media_meta: dict[str, object], memories: str
) -> TurnTaint:
    """The taint a turn starts its tool loop with, from its input and journaled results."""
    taint = TurnTaint()
    if inp.forwarded:
        taint.add_source(f"a forwarded message ({inp.forwarded_from or 'unknown sender'})")
    elif inp.outside_source:
        taint.add_source(inp.outside_source)
    else:
        # The user's own words: a URL they wrote may be fetched whatever else the turn read.
        taint.add_urls(urls_in(inp.text))
    # In a group, a quoted message may be anyone's words; in a private chat, the user's own.
    quoted = inp.reply_to is not None and inp.reply_to.text and not inp.reply_to.from_bot
    if quoted and inp.chat_id < 0:
        taint.add_source("a quoted message from the group")
    if photos:
        taint.add_source("a photo (its text was read)")
    if inp.media is not None:
        if inp.media.kind == "document":
            taint.add_source(f"a document ({inp.media.file_name or 'sent in chat'})")
        elif inp.media.forwarded or inp.media.kind == "audio":
            taint.add_source(f"a transcript of {'forwarded ' if inp.media.forwarded else ''}audio")
    if media_meta.get("document_id") and inp.media is None:
        taint.add_source("a document")
    if inp.scheduled_after:  # planted while its creator was reading outside content
        taint.add_source(f"a scheduled task set up after reading {inp.scheduled_after[:200]}")
    if memories.strip():
        taint.add_source("memories recalled from earlier conversations")
    return taint
