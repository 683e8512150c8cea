"""What an answer stream that broke partway, or was stopped, cost, whatever the provider: the
API bills the tokens it had generated, so the ledger records the attempt (types.CutAttempt)
though no answer came of it. Where the stream had not reported a count yet, the count is
estimated from the text and marked as an estimate; the rule is this module's alone (a whole
answer from a server that sends no count is estimated by it too: openai_mapping.py). So is a
call the server took of which nothing was seen, yet billed: one not streamed that was stopped
while the server worked on it, or whose answer was lost (`answer_lost`: it timed out waiting,
or the server closed the connection without one); and a stream that ended before its first
event (`stream_taken`).
"""

from __future__ import annotations

import asyncio
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


def taken_unseen(model: str, attempt: int, params: dict[str, Any]) -> CutAttempt:
    """A call the server took, of which nothing was received: stopped while the server worked
    on it, or its answer lost (`answer_lost`). Billed, so counted: its input is estimated from
    the request's text; its output, of which nothing was received, is not guessed at (the row
    is marked as an estimate all the same)."""
    usage = Usage(input_tokens=tokens_in(prompt_chars(params)))
    return CutAttempt(model=model, attempt=attempt, usage=usage, estimated=True)


def answer_timed_out(exc: BaseException) -> bool:
    """Whether a failed attempt timed out waiting for the answer to a request sent whole: the
    server took it, so bills it. Not a timeout connecting, sending the request or waiting for
    a pooled connection: nothing, or only part of it, reached the server, which bills none.

    Both SDKs raise their APITimeoutError from the HTTP client's own exception, which their
    documentation gives as its `__cause__`; the client's (httpx's, and httpx2's, its fork)
    ReadTimeout is the one that waited for the answer. Known by its name, as the SDK brings
    the client and may change which of the two it is."""
    return _caused_by(exc, "ReadTimeout")


def answer_lost(exc: BaseException) -> bool:
    """Whether a failed attempt not streamed sent its request whole and lost the answer: timed
    out waiting for it (`answer_timed_out`), or the server closed the connection without one.
    The server had the request and may have worked on it all along (a proxy's idle timeout
    ends a long answer so), so it may bill it: counted, as a read timeout is.

    Both SDKs raise their APIConnectionError from the HTTP client's exception, as they raise
    APITimeoutError; a server that closed the connection without answering is the client's
    RemoteProtocolError ("Server disconnected without sending a response"), or its ReadError
    when it reset the connection: raised only while it read the answer. A connection refused
    or never opened is its ConnectError, and bills nothing. The client cannot say how much of
    the request a server that closed the connection early had read (it reads the answer when
    sending fails, for a server that answers before reading all), so such a call is counted
    too: the row says it is an estimate."""
    return answer_timed_out(exc) or any(
        _caused_by(exc, name) for name in ("RemoteProtocolError", "ReadError")
    )


def _caused_by(exc: BaseException, name: str) -> bool:
    """Whether `exc`, or the exception it was raised from, is of the class `name` (or one
    derived from it)."""
    return any(
        k.__name__ == name for e in (exc, exc.__cause__) if e is not None for k in type(e).__mro__
    )


def stream_taken(exc: BaseException, answered: bool) -> bool:
    """Whether a streamed attempt that ended before its answer's first event was taken by the
    server, so billed: stopped once its request was out (as a call not streamed is), timed out
    waiting for the first event, or `answered` (a 2xx came: the server had begun) and then cut
    or ended; not when the server sent an error in place of the answer, nor when the request
    failed before any answer (an HTTP error, a connection refused, or closed before the 2xx: a
    stream's 2xx comes as the server begins its answer, unlike a whole answer's, so a server
    that closed the connection before it had begun none)."""
    if isinstance(exc, asyncio.CancelledError) or answer_timed_out(exc):
        return True
    return answered and not _server_error(exc)


def _server_error(exc: BaseException) -> bool:
    """An error the server itself reported (either SDK's APIError, a status or an error event
    in the stream), not a connection that broke (its APIConnectionError, or the HTTP client's
    own exception). Known by name, as `answer_timed_out` knows its exceptions."""
    names = {k.__name__ for k in type(exc).__mro__}
    return "APIError" in names and "APIConnectionError" not in names
