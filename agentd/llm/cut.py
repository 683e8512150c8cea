"""What an answer stream that broke partway, or was stopped, cost, whatever the provider: the
API bills the tokens it had generated, so the ledger records the attempt (types.CutAttempt)
though no answer came of it. Where the stream had not reported a count yet, the count is
estimated from the text and marked as an estimate; the rule is this module's alone (a whole
answer from a server that sends no count is estimated by it too: openai_mapping.py). So is a
call not streamed that was stopped while the server worked on it: nothing of it was seen, yet
the request was taken and is billed.
"""

from __future__ import annotations

from typing import Any

from agentd.llm.estimate import tokens_in
from agentd.llm.types import CutAttempt, Usage


def estimated(model: str, attempt: int, reported: Usage, written_chars: int) -> CutAttempt:
    """The attempt's cost with its output estimated from the characters it wrote (never less
    than a count the stream did report)."""
    usage = with_output_estimated(reported, written_chars)
    return CutAttempt(model=model, attempt=attempt, usage=usage, estimated=True)


def with_output_estimated(reported: Usage, written_chars: int) -> Usage:
    """`reported` with its output estimated from the characters written, never less than it
    says: for a stream cut before its count, or one whose server never sends a count."""
    output = max(reported.output_tokens, tokens_in(written_chars))
    return reported.model_copy(update={"output_tokens": output})


def prompt_chars(params: dict[str, Any]) -> int:
    """The characters of text a request body sends (either API's: its system prompt, messages
    and tools), for an estimate of its input tokens; images left out, as what they cost is
    the server's own count."""

    def size(value: Any) -> int:
        if isinstance(value, str):
            return len(value)
        if isinstance(value, dict):
            if value.get("type") == "image":  # the Messages API's block, base64 inside
                return 0
            return sum(size(v) for k, v in value.items() if k != "image_url")
        if isinstance(value, list):
            return sum(size(v) for v in value)
        return 0

    return sum(size(params.get(part)) for part in ("system", "messages", "tools"))


def stopped_unseen(model: str, attempt: int, params: dict[str, Any]) -> CutAttempt:
    """A call not streamed, stopped while the server worked on it: the request was taken, so
    billed. Its input is estimated from the request's text; its output, of which nothing was
    received, is not guessed at (the row is marked as an estimate all the same)."""
    usage = Usage(input_tokens=tokens_in(prompt_chars(params)))
    return CutAttempt(model=model, attempt=attempt, usage=usage, estimated=True)
