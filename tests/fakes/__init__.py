"""Local HTTP fakes of the Telegram Bot API and the Anthropic Messages API.

Imported lazily so ``python -m tests.fakes.telegram`` does not import its own module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.fakes.anthropic import (
        Delay,
        Drop,
        ErrorReply,
        FakeAnthropic,
        Malformed,
        Reply,
        text_reply,
        tool_use_block,
        tool_use_reply,
    )
    from tests.fakes.process import FakeControl, FakeProcess
    from tests.fakes.telegram import FakeTelegram, TelegramError
    from tests.fakes.transcription import FakeTranscription

_EXPORTS = {
    "FakeTelegram": "tests.fakes.telegram",
    "TelegramError": "tests.fakes.telegram",
    "FakeAnthropic": "tests.fakes.anthropic",
    "Reply": "tests.fakes.anthropic",
    "ErrorReply": "tests.fakes.anthropic",
    "Drop": "tests.fakes.anthropic",
    "Malformed": "tests.fakes.anthropic",
    "Delay": "tests.fakes.anthropic",
    "text_reply": "tests.fakes.anthropic",
    "tool_use_reply": "tests.fakes.anthropic",
    "tool_use_block": "tests.fakes.anthropic",
    "FakeTranscription": "tests.fakes.transcription",
    "FakeProcess": "tests.fakes.process",
    "FakeControl": "tests.fakes.process",
}
__all__ = [
    "Delay",
    "Drop",
    "ErrorReply",
    "FakeAnthropic",
    "FakeControl",
    "FakeProcess",
    "FakeTelegram",
    "FakeTranscription",
    "Malformed",
    "Reply",
    "TelegramError",
    "text_reply",
    "tool_use_block",
    "tool_use_reply",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
