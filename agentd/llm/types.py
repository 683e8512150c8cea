"""Provider-neutral LLM messages, requests and responses (what the rest of agentd sees)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from agentd.ledger.pricing import Tokens


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str
    # Web sources the model cited for this text (server-side web search), as the API sent them.
    citations: list[dict[str, Any]] | None = None


class ImageBlock(BaseModel):
    type: Literal["image"] = "image"
    media_type: str
    data: str  # base64


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(BaseModel):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False


class OpaqueBlock(BaseModel):
    """A provider block agentd does not interpret (server tool calls and results), kept verbatim
    so the conversation can be sent back exactly as the model produced it."""

    type: Literal["opaque"] = "opaque"
    raw: dict[str, Any]


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | OpaqueBlock,
    Field(discriminator="type"),
]


class Message(BaseModel):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]
    cache: bool = False  # a cache breakpoint after this message's last block (R-LLM-4)
    # Read back within seconds (the next call of a tool loop) or never: the 5-minute TTL,
    # whose write costs 1.25× the input price instead of the 1-hour TTL's 2×.
    cache_brief: bool = False


class SystemBlock(BaseModel):
    text: str
    cache: bool = False  # a cache breakpoint after this block (R-LLM-4)


class ToolSpec(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]


class LLMRequest(BaseModel):
    # One of PURPOSES (agentd/config/models.py): picks the chain of models ([llm.models], else
    # `model` for turns and `background_model` for the rest) and labels usage.
    purpose: str = "turn"
    system: list[SystemBlock] = Field(default_factory=list)
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: str | None = None  # force this tool (structured output, R-LLM-5)
    server_tools: list[dict[str, Any]] = Field(default_factory=list)  # e.g. provider web search
    max_tokens: int | None = None
    # Per-call text (time, recalled memories) sent as the newest message's last block: after
    # every cache breakpoint, so it never breaks the cached prefix (R-LLM-4).
    context: str = ""
    # Ask this model first (its label: `claude-…` or `provider/model`), e.g. the one that
    # answered the turn's earlier steps, so a resumed turn goes on where it was. The chain's
    # other models still stand behind it.
    model: str | None = None


class Usage(Tokens):
    """Token counts the API reported for one call (input_tokens: uncached input only, as the
    API bills the three input kinds apart)."""


class CutAttempt(BaseModel):
    """An attempt the API took that gave no answer: its stream broke partway or before its
    first event, it was stopped by a cancel (streamed or not), or its answer timed out. The
    API bills what it took and generated, so the ledger records it beside the answer
    that came after (or the error, or the stop). An adapter appends each to the list its
    caller passes as `cut` the moment the attempt ends, so the caller has them however the
    call ends."""

    model: str  # its label, as LLMResponse.label says it
    attempt: int  # which HTTP attempt of that model
    usage: Usage  # input as message_start said; output as the last usage seen, or estimated
    # Counts estimated from text: the output from what was received (and the input from the
    # request, where the provider reports none before its last chunk).
    estimated: bool = False


class LLMResponse(BaseModel):
    model: str  # as the provider named it
    provider: str = "anthropic"  # the configured provider's name that answered
    # Set when an earlier model of the chain was skipped or failed: why (an LLMError.reason).
    fallback_reason: str | None = None
    # What this model could not do of the request and left out, said (never dropped silently).
    notes: list[str] = Field(default_factory=list)
    content: list[ContentBlock]
    stop_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    attempt: int = 1  # which HTTP attempt gave this answer (1: the first; more after retries)
    # `usage` estimated from text (llm/cut.py): the provider sent no count for this answer.
    estimated: bool = False

    @property
    def label(self) -> str:
        """The model as configuration names it (what `LLMRequest.model` pins)."""
        return self.model if self.provider == "anthropic" else f"{self.provider}/{self.model}"

    @property
    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock)).strip()

    @property
    def sources(self) -> list[tuple[str, str]]:
        """(title, url) of every web source cited in the answer, first citation first."""
        seen: dict[str, str] = {}
        for block in self.content:
            if isinstance(block, TextBlock):
                for cite in block.citations or []:
                    if cite.get("url") and cite["url"] not in seen:
                        seen[cite["url"]] = cite.get("title") or cite["url"]
        return [(title, url) for url, title in seen.items()]

    @property
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]


class LLMError(Exception):
    """The model call failed for good; `retryable` says whether trying later could help.

    `reason` is what went wrong, in words a fallback chain and the audit log share: overloaded,
    server_error, timeout, unreachable, rate_limit, billing (a spend limit or unpaid balance),
    auth, bad_request, unsupported (the model cannot do what was asked), malformed, error.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        reason: str = "error",
        model: str | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.reason = reason
        self.model = model  # the label of the model that failed, when one was called
        # Answers paid for before this error, in one (a structured call's that did not fit:
        # llm/structured.py), for the caller's figures (in the ledger already when the call
        # was billed: llm/billing.py); None: none.
        self.spent: LLMResponse | None = None
