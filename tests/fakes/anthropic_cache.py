"""Prompt-cache accounting for the fake Messages API, by the rules Anthropic documents.

Rules (platform.claude.com/docs/en/build-with-claude/prompt-caching, Nov 2026):

- The prompt is one sequence of blocks in the order tools → system → messages; a cache entry
  is the hash of the whole prefix up to and including a block marked with `cache_control`
  (a breakpoint). At most 4 breakpoints; a top-level `cache_control` (automatic caching) puts
  one on the last block and counts towards the 4.
- A prefix shorter than the model's minimum cacheable length is not cached and costs nothing
  extra (no error). Minimums per model: `MIN_CACHEABLE`.
- On a request, each breakpoint looks for a live entry at its own position and at up to 20
  block boundaries before it (the lookback window); the longest hit is read
  (`cache_read_input_tokens`). Every breakpoint past the hit writes its prefix
  (`cache_creation_input_tokens`, split by TTL in `cache_creation`); the rest is plain input.
- An entry lives 5 minutes (`"ttl": "1h"`: one hour) after it was written or last read: a hit
  refreshes it for free.

Token counts are estimates, not Claude's tokenizer: text is 1 token per 4 characters (English
prose runs 3.5–4.5), JSON (tool schemas, tool inputs, images' metadata) 1 per 4 characters of
its compact serialisation, plus 3 tokens of framing per block, plus the 346-token tool-use
system prompt the API adds when tools are sent (the documented figure for Claude 4.x models).
Good enough to cross the minimums where a real prompt of that size would.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
TOOL_USE_SYSTEM_TOKENS = 346
BLOCK_FRAMING_TOKENS = 3
# Shortest cacheable prefix, by model id prefix (longest prefix wins); 1024 otherwise.
MIN_CACHEABLE = {
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
    "claude-haiku-4-5": 4096,
    "claude-sonnet-4-6": 2048,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
    "claude-sonnet-4-5": 1024,
    "claude-sonnet-4": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
}
DEFAULT_MIN_CACHEABLE = 1024


def min_cacheable(model: str) -> int:
    matches = [p for p in MIN_CACHEABLE if model.startswith(p)]
    return MIN_CACHEABLE[max(matches, key=len)] if matches else DEFAULT_MIN_CACHEABLE


def text_tokens(text: str) -> int:
    return max(1, -(-len(text) // 4))


def block_tokens(block: Any) -> int:
    """Estimated tokens of one prompt block (see the module docstring)."""
    if isinstance(block, str):
        return text_tokens(block) + BLOCK_FRAMING_TOKENS
    if block.get("type") == "text":
        return text_tokens(block.get("text", "")) + BLOCK_FRAMING_TOKENS
    if block.get("type") == "image":
        return 1600  # about (width × height) / 750 for a ~1.15 MP image, the documented rule
    if block.get("type") == "tool_result" and isinstance(block.get("content"), str):
        return text_tokens(block["content"]) + 2 * BLOCK_FRAMING_TOKENS
    return text_tokens(json.dumps(block, separators=(",", ":"), ensure_ascii=False)) + 3


@dataclass
class Piece:
    block: Any  # without its cache_control
    ttl: str | None  # None: not a breakpoint


def prompt_pieces(body: dict[str, Any]) -> list[Piece]:
    """The request's blocks in cache order, each with the TTL of its breakpoint, if any."""
    pieces: list[Piece] = []

    def add(block: Any, role: str | None = None) -> None:
        if not isinstance(block, dict):
            pieces.append(Piece({"role": role, "text": block} if role else block, None))
            return
        marker = block.get("cache_control")
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        ttl = (marker.get("ttl") or "5m") if isinstance(marker, dict) else None
        pieces.append(Piece({"role": role, **clean} if role else clean, ttl))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    for block in [system] if isinstance(system, str) else system or []:
        add(block)
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in [content] if isinstance(content, str) else content or []:
            add(block, message.get("role"))
    auto = body.get("cache_control")
    if isinstance(auto, dict) and pieces and pieces[-1].ttl is None:
        pieces[-1].ttl = auto.get("ttl") or "5m"  # automatic caching: the last block
    return pieces


def prefixes(
    body: dict[str, Any], pieces: list[Piece] | None = None
) -> tuple[list[str], list[int]]:
    """For each block: the hash of the prompt up to it (per model) and its running token count."""
    hashes, totals = [], []
    digest = str(body.get("model", "")).encode()  # each model has its own cache
    running = TOOL_USE_SYSTEM_TOKENS if body.get("tools") else 0
    for piece in prompt_pieces(body) if pieces is None else pieces:
        encoded = json.dumps(piece.block, sort_keys=True).encode()
        digest = hashlib.sha256(digest + encoded).digest()
        running += block_tokens(piece.block)
        hashes.append(digest.hex())
        totals.append(running)
    return hashes, totals


class PromptCache:
    """The server's cache of prefix hashes, with expiry on a clock tests can move forward."""

    def __init__(
        self, min_tokens: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """min_tokens: one minimum for every model (None: each model's documented one)."""
        self.min_tokens = min_tokens
        self._clock = clock
        self._offset = 0.0
        self._entries: dict[str, tuple[float, str]] = {}  # prefix hash → (expires at, ttl)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._clock() + self._offset

    def advance(self, seconds: float) -> None:
        """Let this much time pass for the cache (entries expire) without waiting."""
        with self._lock:
            self._offset += seconds

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """The usage fields for one answered request; updates the cache like the API does."""
        pieces = prompt_pieces(body)
        hashes, totals = prefixes(body, pieces)
        total = max(1, totals[-1] if totals else 0)
        minimum = (
            self.min_tokens
            if self.min_tokens is not None
            else min_cacheable(str(body.get("model", "")))
        )
        points = [i for i, p in enumerate(pieces) if p.ttl and totals[i] >= minimum]
        with self._lock:
            read_at = self._longest_hit(points, hashes)
            read = totals[read_at] if read_at is not None else 0
            written = {"5m": 0, "1h": 0}
            done = read
            for i in points:
                if read_at is not None and i <= read_at:
                    continue
                ttl = pieces[i].ttl or "5m"
                written[ttl] += totals[i] - done
                done = totals[i]
                self._entries[hashes[i]] = (self.now() + TTL_SECONDS[ttl], ttl)
        created = written["5m"] + written["1h"]
        return {
            "input_tokens": max(0, total - read - created),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": written["5m"],
                "ephemeral_1h_input_tokens": written["1h"],
            },
        }

    def _longest_hit(self, points: list[int], hashes: list[str]) -> int | None:
        """The furthest block with a live entry, looking back from each breakpoint; refreshed."""
        now = self.now()
        best: int | None = None
        for bp in points:
            for j in range(bp, max(-1, bp - LOOKBACK_BLOCKS - 1), -1):
                entry = self._entries.get(hashes[j])
                if entry is not None and entry[0] > now:
                    best = j if best is None else max(best, j)
                    break
        if best is not None:
            ttl = self._entries[hashes[best]][1]
            self._entries[hashes[best]] = (now + TTL_SECONDS[ttl], ttl)
        return best


def breakpoint_problem(body: dict[str, Any]) -> str | None:
    """The API's 400 for breakpoints it cannot honour: more than 4 (automatic caching counts
    as one), or a 1-hour breakpoint after a 5-minute one (longer TTLs must come first)."""
    ttls = [p.ttl for p in prompt_pieces(body) if p.ttl]
    if len(ttls) > MAX_BREAKPOINTS:
        return (
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(ttls)}."
        )
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        return (
            "A cache_control block with ttl='1h' must not come after a cache_control block "
            "with ttl='5m'."
        )
    return None
