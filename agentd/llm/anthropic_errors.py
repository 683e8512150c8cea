"""The SDK's typed errors, read as agentd's retry policy and fallback chain need them.

Decided on the status and the API's own error type in the body (`overloaded_error`,
`billing_error`, a `…spend_limit…` code), not on a list of the SDK's subclasses, so an error
class a new release adds is still classified by what the API said.
"""

from __future__ import annotations

import sys
from typing import Any

from agentd.llm.types import LLMError


class StreamIncomplete(Exception):
    """The stream ended cleanly but early: no message_stop, or inside a content block."""


def _sdk() -> Any:
    return sys.modules.get("anthropic")  # loaded by the time any call has failed


def _error_type(exc: Any) -> str:
    """The API's error type, or the finer code behind it (e.g. a spend limit behind a 429)."""
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ""
    code = (error.get("details") or {}).get("error_code") if isinstance(error, dict) else None
    if isinstance(code, str) and code:
        return code
    return str(error.get("type") or "")


def _is_status_error(exc: BaseException) -> bool:
    sdk = _sdk()
    return sdk is not None and isinstance(exc, sdk.APIStatusError)


def reason(exc: BaseException) -> str:
    """What went wrong, as LLMError.reason names it."""
    sdk = _sdk()
    if isinstance(exc, StreamIncomplete | ValueError):
        return "malformed"  # a cut stream or broken JSON: transient as far as we can tell
    if sdk is not None and isinstance(exc, sdk.APITimeoutError):
        return "timeout"
    if sdk is not None and isinstance(exc, sdk.APIConnectionError):
        return "unreachable"
    if sdk is not None and isinstance(exc, sdk.APIResponseValidationError):
        return "malformed"
    if not _is_status_error(exc):
        return "unreachable" if _is_transport_error(exc) else "error"
    status, kind = exc.status_code, _error_type(exc)  # type: ignore[attr-defined]
    if "spend_limit" in kind or kind == "billing_error" or status == 402:
        return "billing"  # waiting does not raise a spend limit or pay a bill
    if status == 529 or kind == "overloaded_error":
        return "overloaded"
    if status == 429:
        return "rate_limit"
    if status in (408, 504) or kind == "timeout_error":
        return "timeout"
    if status == 200 or status == 409 or status >= 500:  # 200: `event: error` mid-stream
        return "server_error"
    if status in (401, 403):
        return "auth"
    return "bad_request"


def _is_transport_error(exc: BaseException) -> bool:
    """A connection that broke inside a stream can surface as the HTTP library's own error."""
    return any(c.__name__ in ("TransportError", "StreamError") for c in type(exc).__mro__)


RETRYABLE = frozenset(
    {"malformed", "timeout", "unreachable", "overloaded", "rate_limit", "server_error"}
)


def is_retryable(exc: BaseException) -> bool:
    """429 (except spend limits), 408, 409, 5xx and 529, timeouts and dropped connections."""
    return reason(exc) in RETRYABLE


def retry_after(exc: BaseException) -> float | None:
    """The server's Retry-After (or retry-after-ms) in seconds, if it sent one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms"):
            return float(headers["retry-after-ms"]) / 1000
        if headers.get("retry-after"):
            return float(headers["retry-after"])
    except ValueError:
        return None  # an HTTP date: the backoff is good enough
    return None


def describe(exc: BaseException) -> str:
    # Never echo request bodies or headers: the API's name for it and the status are enough.
    if _is_status_error(exc):
        kind = _error_type(exc) or type(exc).__name__
        return f"{kind} (HTTP {exc.status_code})"  # type: ignore[attr-defined]
    return type(exc).__name__


def to_llm_error(exc: BaseException, model: str) -> LLMError:
    why = reason(exc)
    return LLMError(
        f"the model call to {model} failed: {describe(exc)}",
        retryable=why in RETRYABLE,
        status=exc.status_code if _is_status_error(exc) and why != "malformed" else None,  # type: ignore[attr-defined]
        reason=why,
        model=model,
    )
