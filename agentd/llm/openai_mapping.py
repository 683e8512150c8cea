"""agentd's neutral request and response in Chat Completions terms, both ways.

Plain dicts in, plain dicts out (no SDK import): tools become functions, tool results `tool`
messages, images `image_url` data URLs; what has no counterpart is said, never dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from agentd.llm.cut import with_output_estimated
from agentd.llm.estimate import tokens_in
from agentd.llm.types import (
    CutAttempt,
    ImageBlock,
    LLMError,
    LLMRequest,
    LLMResponse,
    Message,
    OpaqueBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class Capabilities:
    """What one model may be sent: None means assumed (and detected from a refusal)."""

    def __init__(self, tools: bool | None, images: bool | None) -> None:
        self.tools = tools
        self.images = images


def unsupported(label: str, what: str, how: str) -> LLMError:
    return LLMError(
        f"{label} cannot take {what} ({how}); name a model that can for this purpose in "
        "[llm.models], or put one after it in [llm] fallbacks",
        retryable=False,
        reason="unsupported",
        model=label,
    )


def json_mode(req: LLMRequest, caps: Capabilities) -> bool:
    """A forced single tool (a structured answer, R-LLM-5) to a model without tool calls: asked
    for as JSON matching the tool's schema instead, and read back as that tool's call."""
    return (
        caps.tools is False
        and bool(req.tool_choice)
        and [t.name for t in req.tools] == [req.tool_choice]
    )


def check(req: LLMRequest, caps: Capabilities, label: str, provider: str) -> None:
    """Refuse, before the call, what the model is configured or known not to do."""
    if (req.tools or req.tool_choice) and caps.tools is False and not json_mode(req, caps):
        raise unsupported(label, "tool calls", f"llm.providers.{provider}.tools is false")
    if caps.images is False and any(
        isinstance(b, ImageBlock)
        for m in req.messages
        if isinstance(m.content, list)
        for b in m.content
    ):
        raise unsupported(label, "images", f"llm.providers.{provider}.images is false")


def _text_of(block: Any) -> str | None:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, OpaqueBlock):  # a Claude server tool's block, from an earlier step
        return f"[{block.raw.get('type', 'provider block')} from another model, not shown]"
    return None


def _user(message: Message, context: str) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
        results: list[dict[str, Any]] = []
    else:
        parts, results = [], []
        for b in message.content:
            if isinstance(b, ToolResultBlock):
                content = f"error: {b.content}" if b.is_error else b.content
                results.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": content})
            elif isinstance(b, ImageBlock):
                url = f"data:{b.media_type};base64,{b.data}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            elif (text := _text_of(b)) is not None:
                parts.append({"type": "text", "text": text})
    if context:
        parts.append({"type": "text", "text": context})
    out = list(results)  # tool messages first: they must follow the assistant's calls
    if parts:
        simple = all(p["type"] == "text" for p in parts)
        content = "\n\n".join(p["text"] for p in parts) if simple else parts
        out.append({"role": "user", "content": content})
    return out


def _assistant(message: Message) -> dict[str, Any]:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    texts = [t for b in message.content if (t := _text_of(b)) is not None]
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": json.dumps(b.input)},
        }
        for b in message.content
        if isinstance(b, ToolUseBlock)
    ]
    out: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
    if calls:
        out["tool_calls"] = calls
    return out


def build_params(
    req: LLMRequest, model: str, max_tokens: int, as_json: bool = False
) -> dict[str, Any]:
    """The Chat Completions body (server-side tools are left to the caller to report)."""
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": "\n\n".join(b.text for b in req.system)})
    last = len(req.messages) - 1
    for i, m in enumerate(req.messages):
        if m.role == "assistant":
            messages.append(_assistant(m))
        else:
            messages.extend(_user(m, req.context if i == last else ""))
    if last >= 0 and req.messages[last].role == "assistant" and req.context:
        messages.append({"role": "user", "content": req.context})
    params: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": req.max_tokens or max_tokens,
    }
    if as_json:
        spec = req.tools[0]
        params["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": spec.name, "schema": spec.input_schema},
        }
        messages.append(
            {"role": "user", "content": f"Answer with JSON only, for: {spec.description}"}
        )
        return params
    if req.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in req.tools
        ]
    if req.tool_choice:
        params["tool_choice"] = {"type": "function", "function": {"name": req.tool_choice}}
    return params


def _arguments(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    value = json.loads(raw)  # ValueError: a broken answer, retried
    if not isinstance(value, dict):
        raise ValueError("tool arguments are not a JSON object")
    return value


def usage_of(usage: dict[str, Any] | None) -> Usage:
    usage = usage or {}
    prompt = usage.get("prompt_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=usage.get("completion_tokens") or 0,
        cache_read_tokens=cached,
    )


def parse_response(
    message: dict[str, Any],
    finish: str | None,
    usage: dict[str, Any] | None,
    model: str,
    attempt: int = 1,
    as_tool: str | None = None,
) -> LLMResponse:
    """One assistant message (whole, or folded from a stream) as agentd's response; with
    `as_tool`, its text is a JSON answer read back as that tool's call."""
    content: list[Any] = []
    if as_tool is not None:
        use = ToolUseBlock(id="json_answer", name=as_tool, input=_arguments(message.get("content")))
        return LLMResponse(
            model=model,
            content=[use],
            stop_reason="tool_use",
            usage=usage_of(usage),
            attempt=attempt,
        )
    if message.get("content"):
        content.append(TextBlock(text=message["content"]))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append(
            ToolUseBlock(id=call["id"], name=fn["name"], input=_arguments(fn.get("arguments")))
        )
    return LLMResponse(
        model=model,
        content=content,
        stop_reason=STOP_REASONS.get(finish or "", finish),
        usage=usage_of(usage),
        attempt=attempt,
    )


def counted(usage: dict[str, Any] | None, prompt: int, written: int) -> tuple[Usage, bool]:
    """An answer's tokens, and whether they are estimated: the server's count where it sent
    one; else the input from the request's `prompt` characters and the output from the
    `written` characters received (llm/cut.py's rule), never 0 tokens, which would let the
    model past every [limits] budget."""
    if usage:
        return usage_of(usage), False
    return with_output_estimated(Usage(input_tokens=tokens_in(prompt)), written), True


def reasoning_chars(part: dict[str, Any]) -> int:
    """The characters of a reasoning model's thinking in a message or a delta: billed output
    that agentd does not show. DeepSeek and vLLM name it `reasoning_content`, Ollama and
    OpenRouter `reasoning`; a server sending both sends the same text twice, so one counts."""
    for name in ("reasoning_content", "reasoning"):
        found = part.get(name)
        if isinstance(found, str) and found:
            return len(found)
    return 0


def written_chars(message: dict[str, Any]) -> int:
    """The characters of text, thinking and tool arguments in an assistant message."""
    calls = message.get("tool_calls") or []
    arguments = sum(len((c.get("function") or {}).get("arguments") or "") for c in calls)
    return len(message.get("content") or "") + reasoning_chars(message) + arguments


class ChunkFold:
    """Streamed chunks folded into one message: text, tool calls by index, finish, usage."""

    def __init__(self) -> None:
        self.text = ""
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.answered = False  # a 2xx answer came: the server took the request
        self.started = False  # a chunk came: the server took the request, so bills it
        self.written = 0  # characters of text, thinking and tool arguments received

    def cut(self, model: str, attempt: int, prompt: int) -> CutAttempt | None:
        """What the attempt cost when its stream ended partway (None: it never started).

        The usage comes in the last chunk only (`include_usage`); before it, both counts are
        estimates: the input from the request's `prompt` characters, the output from what
        was received."""
        if not self.started:
            return None
        usage, guessed = self.counted(prompt)
        return CutAttempt(model=model, attempt=attempt, usage=usage, estimated=guessed)

    def counted(self, prompt: int) -> tuple[Usage, bool]:
        """The stream's tokens, and whether they are estimated (`counted`): a stream cut before
        its last chunk, or from a server that ignores `include_usage`, has no count."""
        return counted(self.usage, prompt, self.written)

    def add(self, chunk: dict[str, Any]) -> bool:
        """Fold one chunk in; True when it added text."""
        self.started = True
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        grew = False
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            self.written += reasoning_chars(delta)
            if delta.get("content"):
                self.text += delta["content"]
                self.written += len(delta["content"])
                grew = True
            for call in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(call.get("index", 0), {"arguments": ""})
                if call.get("id"):
                    slot["id"] = call["id"]
                fn = call.get("function") or {}
                if fn.get("name"):
                    slot["name"] = fn["name"]
                slot["arguments"] += fn.get("arguments") or ""
                self.written += len(fn.get("arguments") or "")
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        return grew

    def message(self) -> dict[str, Any]:
        calls = [
            {
                "id": c.get("id") or f"call_{i}",
                "function": {"name": c.get("name", ""), "arguments": c["arguments"]},
            }
            for i, c in sorted(self.calls.items())
        ]
        return {"content": self.text or None, "tool_calls": calls}
