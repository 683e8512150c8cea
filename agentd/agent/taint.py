"""Which outside content the model has in view in a turn, and which URLs its user wrote.

Taint is a property of what the model sees, not of the turn that first read it. A turn is
tainted while its context holds anything its users did not write themselves: its own input
when that is someone else's words (a forwarded message or audio, a document, a photo's text, a
webhook body, a schedule planted after outside content, a quoted notice), a stored message in
its history window that came from outside (provenance.py), a memory or fact derived from
outside content that recall brought in, or the result of a tool with `taints` it ran. From then
on a tool with `egress` asks the owner (tools/policy.py), and `fetch_url` asks for any URL
the user did not write, byte for byte, unless the owner allowed its host.

Everything here is computed from the turn's input, its journaled steps and rows that do not
change once written, never from the live registry: a replay after a crash reaches the same
taint at the same call.
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
    """The outside content in view so far (`sources`) and the URLs the user wrote (`user_urls`)."""

    sources: list[str] = Field(default_factory=list)
    user_urls: list[str] = Field(default_factory=list)

    def add_source(self, source: str) -> None:
        if source not in self.sources and len(self.sources) < _MAX_SOURCES:
            self.sources.append(source)

    def add_user_urls(self, urls: Iterable[str]) -> None:
        known = set(self.user_urls)
        for url in urls:
            if url not in known and len(self.user_urls) < _MAX_URLS:
                self.user_urls.append(url)
                known.add(url)

    @property
    def tainted_by(self) -> tuple[str, ...]:
        return tuple(self.sources)


def input_sources(inp: TurnInput, *, photos: int, media_meta: dict[str, object]) -> list[str]:
    """The outside content the turn's own input carries, in words ([]: the user's own)."""
    found: list[str] = []
    if inp.forwarded:
        found.append(f"a forwarded message ({inp.forwarded_from or 'unknown sender'})")
    elif inp.outside_source:
        found.append(inp.outside_source)
    # In a group, a quoted message may be anyone's words; in a private chat, the user's own,
    # unless it was a forward. A quote of the bot is its own words only when they come from
    # the server or agentd's record, never from the sender's copy.
    reply = inp.reply_to
    quoted = reply is not None and reply.text and (not reply.from_bot or reply.unverified)
    if quoted and inp.reply_to is not None and inp.reply_to.forwarded:
        found.append("a quoted forwarded message")
    elif quoted and not inp.private:
        found.append("a quoted message from the group")
    if photos:
        found.append("a photo (its text was read)")
    if inp.media is not None:
        if inp.media.kind == "document":
            found.append(f"a document ({inp.media.file_name or 'sent in chat'})")
        elif inp.media.forwarded or inp.media.kind == "audio":
            found.append(f"a transcript of {'forwarded ' if inp.media.forwarded else ''}audio")
    if media_meta.get("document_id") and inp.media is None:
        found.append("a document")
    if inp.scheduled_after:  # planted while its creator was reading outside content
        found.append(f"a scheduled task set up after reading {inp.scheduled_after[:200]}")
    return found


def turn_taint(
    inp: TurnInput,
    *,
    photos: int,
    media_meta: dict[str, object],
    memories: str,
    context: Iterable[str] = (),
    recalled: Iterable[str] | None = None,
) -> TurnTaint:
    """The taint a turn starts its tool loop with: its input (`input_sources`), the outside
    content still in its history window and quoted (`context`, provenance.py), and the
    recalled memories and facts derived from outside content (`recalled`; None: a recall
    journaled before memories said where they came from, which taints whenever it found any)."""
    taint = TurnTaint()
    own = input_sources(inp, photos=photos, media_meta=media_meta)
    for source in own:
        taint.add_source(source)
    if not (inp.forwarded or inp.outside_source):
        # The user's own words: a URL they wrote may be fetched whatever else the turn read.
        taint.add_user_urls(urls_in(inp.text))
    for source in context:
        taint.add_source(source)
    if recalled is None:
        if memories.strip():
            taint.add_source("memories recalled from earlier conversations")
    else:
        for source in recalled:
            taint.add_source(source)
    return taint
