"""agentd's own JavaScript world in a page and its frames, over CDP: where a page is read, and
where an action checks its element (and submits its form) before acting.

A page shares its DOM with that world but not its JavaScript: a page that rewrote
`Array.prototype.push` or `String.prototype.slice` in its own world would make the reading's
caps lie (a 30-times `push` turned 200 links into 130,000 elements, 33 MB), and one that
rewrote a getter would make a changed element pass the check.

Every frame is read in a world of its own in that frame, the page's and each frame's text and
elements counted against the same caps. A frame from another site runs in another process,
reached over a CDP session of its own; a frame that does not answer in time is left out, not
the page.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentd.browser.pages import SNAPSHOT_JS, Element, FrameRead, Snapshot, tidy

MAX_FRAME_DEPTH = 3  # a frame in a frame in a frame is read; one deeper is not
MAX_FRAMES = 12  # frames read in one reading, at every depth
# A session on a frame whose script never yields may not detach until the frame is gone: the
# reading waits this long, then leaves the detaching to a task the service keeps.
_DETACH_SECONDS = 0.5
Keep = Callable[["asyncio.Task[None]"], None]


class PageScriptError(Exception):
    """A script of agentd's threw in the page (its message is the page's, not shown)."""


class FrameGone(Exception):
    """The frame is no longer in the page."""


class Worlds:
    """The CDP sessions one reading or check of a page uses: the page's own, and one for each
    frame that runs in a process of its own; all detached at the end."""

    def __init__(self, context: Any, page: Any, keep: Keep) -> None:
        self.context = context
        self.page = page
        self._keep = keep
        self._sessions: list[Any] = []
        self._owner: dict[str, Any] = {}  # frame id → the session whose process runs it
        self._attached: set[int] = set()  # the Playwright frames with a session of their own
        self._root = ""

    async def __aenter__(self) -> Worlds:
        return self

    async def __aexit__(self, *_: object) -> None:
        if not self._sessions:
            return
        detaching = {asyncio.ensure_future(_detach(cdp)) for cdp in self._sessions}
        _, pending = await asyncio.wait(detaching, timeout=_DETACH_SECONDS)
        for task in pending:
            self._keep(task)

    async def world(self, frame_id: str = "") -> tuple[Any, int]:
        """A session and agentd's world in the frame `frame_id` (the page's own when empty)."""
        if not self._root:
            self._root = await self._attach(self.page)
        frame_id = frame_id or self._root
        cdp = self._owner.get(frame_id) or await self._search(frame_id)
        made = await cdp.send(
            "Page.createIsolatedWorld", {"frameId": frame_id, "worldName": "agentd"}
        )
        return cdp, made["executionContextId"]

    async def _attach(self, target: Any) -> str:
        cdp = await self.context.new_cdp_session(target)
        self._sessions.append(cdp)
        return await self._map(cdp)

    async def _map(self, cdp: Any) -> str:
        tree = (await cdp.send("Page.getFrameTree"))["frameTree"]
        stack = [tree]
        while stack:
            node = stack.pop()
            self._owner.setdefault(node["frame"]["id"], cdp)
            stack.extend(node.get("childFrames", []))
        return str(tree["frame"]["id"])

    async def _search(self, frame_id: str) -> Any:
        """The session of a frame not seen yet: one that appeared since, or one in another
        process (Chromium gives each a CDP target; Playwright, a session on it)."""
        for cdp in list(self._sessions):
            await self._map(cdp)
        for frame in self.page.frames[1:]:
            if frame_id in self._owner:
                break
            if id(frame) in self._attached:
                continue
            self._attached.add(id(frame))
            with contextlib.suppress(Exception):  # in its parent's process: no session of its own
                await self._attach(frame)
        if frame_id not in self._owner:
            raise FrameGone(frame_id)
        return self._owner[frame_id]

    @staticmethod
    async def evaluate(cdp: Any, context: int, expression: str, by_value: bool = True) -> Any:
        answer = await cdp.send(
            "Runtime.evaluate",
            {"expression": expression, "contextId": context, "returnByValue": by_value},
        )
        if "exceptionDetails" in answer:
            raise PageScriptError(str(answer["exceptionDetails"].get("text", "")))
        return answer["result"].get("value") if by_value else answer["result"]

    async def child_frame(self, cdp: Any, context: int, index: int) -> str:
        """The id of the frame in the `index`th frame element the reading met in that world."""
        found = await self.evaluate(cdp, context, f"agentdFrames[{index}]", by_value=False)
        if "objectId" not in found:
            raise FrameGone(str(index))
        node = await cdp.send("DOM.describeNode", {"objectId": found["objectId"]})
        frame_id = node["node"].get("frameId")
        if not frame_id:
            raise FrameGone(str(index))
        return str(frame_id)


async def _detach(cdp: Any) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(cdp.detach(), 60)


async def run(context: Any, page: Any, keep: Keep, frame_id: str, expression: str) -> Any:
    """`expression`'s value in agentd's world of the frame `frame_id` (the page's when empty)."""
    async with Worlds(context, page, keep) as worlds:
        cdp, world = await worlds.world(frame_id)
        return await worlds.evaluate(cdp, world, expression)


@dataclass
class _Reading:
    """One reading's running totals over the page and its frames."""

    worlds: Worlds
    gen: int
    max_chars: int
    max_elements: int
    frames_by: float  # monotonic: frames not read by then are left out
    numbered: int = 0
    chars_left: int = 0
    frames_left: int = MAX_FRAMES
    cut: bool = False
    unnumbered: int = 0
    elements: list[Element] = field(default_factory=list)
    frame_of: dict[str, str] = field(default_factory=dict)

    async def frame(self, frame_id: str, depth: int) -> tuple[str, FrameRead]:
        cdp, world = await self.worlds.world(frame_id)
        deeper = depth < MAX_FRAME_DEPTH
        args = [self.chars_left, self.max_elements, self.gen, self.numbered, deeper]
        raw = FrameRead.model_validate(
            await self.worlds.evaluate(cdp, world, f"({SNAPSHOT_JS})({json.dumps(args)})")
        )
        self.numbered = max(self.numbered, raw.n)
        self.chars_left -= sum(len(p) for p in raw.parts)
        self.cut = self.cut or raw.cut
        self.unnumbered += raw.over
        for el in raw.elements:
            if depth:
                el.frame = raw.url
                self.frame_of[el.ref] = frame_id
        self.elements.extend(raw.elements)
        pieces = [raw.parts[0]]
        for index, part in enumerate(raw.parts[1:]):
            pieces.append(await self._child(cdp, world, index, depth))
            pieces.append(part)
        return "".join(pieces), raw

    async def _child(self, cdp: Any, world: int, index: int, depth: int) -> str:
        if self.chars_left <= 0:
            self.cut = True
            return ""
        if self.frames_left <= 0:
            return f"\n[a frame, not read: a reading takes a page's first {MAX_FRAMES} frames]\n"
        left = self.frames_by - time.monotonic()
        if left <= 0:
            return "\n[a frame, not read: the page's frames took too long]\n"
        self.frames_left -= 1
        try:
            async with asyncio.timeout(left):
                frame_id = await self.worlds.child_frame(cdp, world, index)
                text, raw = await self.frame(frame_id, depth + 1)
        except TimeoutError:
            return "\n[a frame that did not answer in time, not read]\n"
        except Exception:  # gone, navigated away meanwhile, or its script threw
            return "\n[a frame that could not be read]\n"
        return f"\n[frame {raw.url[:200]}]\n{text}\n[end of frame]\n"


@dataclass(frozen=True)
class Caps:
    max_chars: int
    max_elements: int
    frame_seconds: float  # frames not read this long after the reading began are left out


async def read_page(
    context: Any, page: Any, keep: Keep, gen: int, caps: Caps
) -> tuple[Snapshot, dict[str, str]]:
    """The page and its frames as the model reads them (capped in each frame before anything
    crosses to agentd), and the frame each element read in a frame is in."""
    max_chars = caps.max_chars
    async with Worlds(context, page, keep) as worlds:
        reading = _Reading(
            worlds,
            gen,
            max_chars,
            caps.max_elements,
            frames_by=time.monotonic() + caps.frame_seconds,
            chars_left=max_chars,
        )
        text, top = await reading.frame("", 0)
    text = tidy(text)
    if len(text) > max_chars:
        text, reading.cut = text[:max_chars], True
    snap = Snapshot(
        title=top.title,
        url=top.url,
        text=text,
        elements=reading.elements,
        cut=reading.cut,
        unnumbered=reading.unnumbered,
    )
    return snap, reading.frame_of
