"""Watch a web page; when it changes, say what changed. No model call unless it changed.

    agentd workflows start page_watch --input '{"url": "https://example.com/parcel/123",
        "what": "the parcel status", "every_minutes": 30}'

Each check is a journaled step holding only the page's hash and text (not the page), and the
wait between checks is a durable sleep: a restart neither skips a check nor repeats one. After
`rounds` checks the watch continues as a new instance, so no journal grows without end; cancel
it with `agentd workflows cancel ID` (the newest instance: `agentd workflows ls --workflow
page_watch`).
"""

from __future__ import annotations

import hashlib
import re
from html import unescape

import aiohttp
from pydantic import BaseModel, Field, HttpUrl

from agentd.automations import AutoStep, Retry, workflow

MAX_PAGE_BYTES = 2 * 1024 * 1024
MAX_TEXT = 6000  # characters of the page kept for the comparison and the model


class Watch(BaseModel):
    url: HttpUrl
    what: str = Field(default="the page", max_length=200)
    every_minutes: float = Field(default=60, ge=0.01)  # 0.01: tests
    rounds: int = Field(default=48, ge=1, le=200)
    last_hash: str = ""  # carried into the next instance
    last_text: str = ""


class Snapshot(BaseModel):
    hash: str
    text: str


class Change(BaseModel):
    summary: str = Field(description="One or two sentences: what changed, for the owner.")


class Watched(BaseModel):
    checks: int
    changes: int
    next_instance: str


def _text(html: str) -> str:
    html = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", html)
    text = unescape(re.sub(r"(?s)<[^>]+>", " ", html))
    return re.sub(r"\s+", " ", text).strip()[:MAX_TEXT]


async def snapshot(url: str) -> Snapshot:
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url) as response:
        response.raise_for_status()
        body = await response.content.read(MAX_PAGE_BYTES)
    text = _text(body.decode(response.charset or "utf-8", errors="replace"))
    return Snapshot(hash=hashlib.sha256(text.encode()).hexdigest(), text=text)


@workflow("page_watch", input=Watch, output=Watched, version=1)
async def page_watch(step: AutoStep, inp: Watch) -> Watched:
    """Check the page every few minutes; tell the owner what changed when it does."""
    last_hash, last_text, changes = inp.last_hash, inp.last_text, 0
    for n in range(1, inp.rounds + 1):
        page = await step.do(f"fetch#{n}", snapshot, str(inp.url),
                             retry=Retry(limit=4, delay=10, max_delay=300))  # fmt: skip
        if last_hash and page.hash != last_hash:
            change = await step.llm(
                f"compare#{n}",
                f"The owner watches {inp.what} at {inp.url}. Before:\n<before>{last_text}"
                f"</before>\nNow:\n<now>{page.text}</now>\nSay briefly what changed.",
                output=Change,
            )
            await step.send(f"notify#{n}", f"🔔 {inp.what} changed: {change.summary}\n{inp.url}")
            changes += 1
        last_hash, last_text = page.hash, page.text
        if n < inp.rounds:
            await step.sleep(f"wait#{n}", inp.every_minutes * 60)
    carry = inp.model_copy(update={"last_hash": last_hash, "last_text": last_text})
    await step.sleep("wait#last", inp.every_minutes * 60)
    nxt = await step.start("continue", "page_watch", carry)
    return Watched(checks=inp.rounds, changes=changes, next_instance=nxt)
