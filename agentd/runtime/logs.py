"""Structured logging: one JSON object per line on stderr, with secrets redacted."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from agentd.runtime.redact import Redactor

_RESERVED = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
# Loggers that write protocol traffic at DEBUG: imapclient (every IMAP line, the mails
# fetched), caldav (request and response bodies, the Authorization header), mautrix's
# "mau" (a request's content), and the HTTP stacks under them (niquests' urllib3-future
# with its HTTP/2 and HTTP/3 codecs, httpcore's traces).
WIRE_LOGGERS = (
    "imapclient",
    "caldav",
    "mau",
    "niquests",
    "urllib3",
    "urllib3_future",
    "jh2",
    "qh3",
    "httpcore",
    "httpcore2",
    "hpack",
    "h2",
    "websockets",
)


class JsonFormatter(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": self._redact(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = self._scrub(value)
        if record.exc_info:
            entry["exc"] = self._redact(self.formatException(record.exc_info))
        # Redacted before dumping: JSON escapes a secret's quotes and backslashes, and a
        # field may already hold it escaped once (a repr), which the line would escape again.
        return json.dumps(entry, default=lambda obj: self._redact(str(obj)), ensure_ascii=False)

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._redact(value)
        if isinstance(value, dict):
            return {
                self._redact(k) if isinstance(k, str) else k: self._scrub(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._scrub(v) for v in value]
        if isinstance(value, int | float) and not isinstance(value, bool):
            said = str(value)  # a PIN configured as a secret, logged as a number
            hidden = self._redact(said)
            return hidden if hidden != said else value
        return value


class TextFormatter(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(
            f"{k}={v}"
            for k, v in record.__dict__.items()
            if k not in _RESERVED and not k.startswith("_")
        )
        return self._redact(f"{super().format(record)} {extras}".rstrip())


def setup_logging(level: str, fmt: str, redact: Redactor) -> None:
    """Configure the root logger for the daemon (stderr, so journald collects it); every line
    goes through `redact`, the process's one redactor (what it learns later is hidden too)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "auto":
        fmt = "text" if sys.stderr.isatty() else "json"
    handler.setFormatter(JsonFormatter(redact) if fmt == "json" else TextFormatter(redact))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Library chatter at INFO would log every HTTP request (and aiohttp URLs hold the bot token).
    for noisy in ("aiogram", "aiohttp", "httpx", "httpx2", "anthropic", "mcp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    # The owner's DEBUG is agentd's own: these clients log what crosses the wire at DEBUG,
    # which is private content no redactor can know (whole mails, calendar events, a Matrix
    # message) and headers in forms it cannot read (an HTTP/2 header block, HPACK-coded).
    for wire in WIRE_LOGGERS:
        logging.getLogger(wire).setLevel(max(logging.INFO, logging.getLevelName(level)))
