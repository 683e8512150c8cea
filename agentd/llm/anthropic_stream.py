"""The Messages API's stream events folded into the final message, on the JSON as it arrives.

The SDK's stream helper builds a pydantic event and a pydantic snapshot of the whole message for
every event; on a short answer that was most of a turn's model-call CPU. This is the same fold as
the SDK's `accumulate_event`, on plain dicts; the SDK still makes the request, decodes the
server-sent events and raises its errors (an `event: error` included).
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json


class StreamIncomplete(Exception):
    """The stream ended cleanly but early: no message_stop, or inside a content block."""


class MessageFold:
    """Feed it each event; `text_so_far` after a text delta, `result()` once it has stopped."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.stopped = False
        self._open = 0
        self._json: dict[int, list[str]] = {}  # tool inputs arrive as JSON text in pieces

    def add(self, event: Any) -> str | None:
        """Fold one event in; the current text block's text when this event added to it."""
        try:
            return self._add(event)
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            # A proxy or a broken server can send events out of order or malformed: transient
            # as far as we can tell, so ValueError, which the adapter retries.
            raise ValueError(f"malformed stream event ({type(exc).__name__})") from None

    def _add(self, event: dict[str, Any]) -> str | None:
        kind = event["type"]
        if kind == "message_start":
            self.message = {**event["message"], "content": []}
            return None
        if self.message is None:
            if kind == "ping":
                return None
            raise KeyError("message_start")
        content: list[dict[str, Any]] = self.message["content"]
        if kind == "content_block_start":
            block = dict(event["content_block"])
            index = event["index"]
            if index != len(content):
                raise IndexError(index)
            content.append(block)
            if block["type"] in ("tool_use", "server_tool_use"):
                self._json[index] = []
            self._open += 1
        elif kind == "content_block_delta":
            return self._delta(content[event["index"]], event["index"], event["delta"])
        elif kind == "content_block_stop":
            index = event["index"]
            self._open -= 1
            parts = self._json.pop(index, None)
            if parts is not None:
                raw = "".join(parts)
                # Partial mode, as the SDK parses it: an input cut by max_tokens is kept as far
                # as it got; JSON that is wrong (not just short) raises ValueError.
                content[index]["input"] = from_json(raw, allow_partial=True) if raw else {}
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.message["stop_reason"] = delta.get("stop_reason")
            self.message["stop_sequence"] = delta.get("stop_sequence")
            # Counts here are cumulative; the API may send input and cache counts too.
            usage = self.message.setdefault("usage", {})
            usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.stopped = True
        return None

    def _delta(self, block: dict[str, Any], index: int, delta: dict[str, Any]) -> str | None:
        kind, into = delta["type"], block["type"]
        if kind == "text_delta" and into == "text":
            block["text"] = block.get("text", "") + delta["text"]
            return block["text"]
        if kind == "input_json_delta" and index in self._json:
            self._json[index].append(delta["partial_json"])
        elif kind == "citations_delta" and into == "text":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]
        elif kind == "thinking_delta" and into == "thinking":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta" and into == "thinking":
            block["signature"] = delta["signature"]
        return None

    def result(self) -> dict[str, Any]:
        """The whole message; StreamIncomplete when the stream did not end as the API ends it."""
        if self.message is None or not self.stopped or self._open:
            # A proxy or a cut connection can end the body cleanly: a partial (even empty)
            # answer must not pass as whole.
            where = "inside a content block" if self._open else "without message_stop"
            raise StreamIncomplete(f"the answer stream ended {where}")
        return self.message
