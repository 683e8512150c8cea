"""Structured logging: one JSON object per line on stderr, with secrets redacted."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

_RESERVED = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}

# Shorter values would blank out common words all over the log.
MIN_SECRET_LENGTH = 6
# What an HTTP client leaves unencoded around a value: nothing, a path's "/", and the
# sub-delimiters yarl (aiohttp's URLs) keeps in a query value and in a path segment.
_URL_SAFE = ("", "/", "/?:@!$'()*,~", "/:@!$&'()*+,;=~")
# What no URL encoding, repr() or JSON escapes: every form of a secret holds these runs as is.
_UNESCAPED = re.compile(r"[A-Za-z0-9_.~-]+")


def _escapes(text: str) -> set[str]:
    """`text` as repr() and json.dumps() write it inside a quoted string."""
    return {
        repr(text)[1:-1],
        # Inside a longer text repr() may pick the other quote, escaping a ' the text holds.
        repr("'\"" + text)[4:-1],
        json.dumps(text)[1:-1],
        json.dumps(text, ensure_ascii=False)[1:-1],
    }


def secret_forms(secret: str) -> set[str]:
    """The secret as written, and as the code between it and a log line may have escaped it:
    percent-encoded in a URL or a form, quoted by repr() or JSON, or twice (the repr of an
    exception whose message quotes the secret)."""
    forms = {secret}
    for safe in _URL_SAFE:
        forms.add(quote(secret, safe=safe))
        forms.add(quote_plus(secret, safe=safe))
    for once in _escapes(secret):
        forms |= {once, *_escapes(once)}
    return forms


class Redactor:
    """Replaces known secret values, and their escaped forms, wherever they would be written."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        kept = {s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}
        # Longest secret first, so one that holds another is replaced whole (each form of the
        # longer holds the same form of the shorter); within one, its longest form first.
        self._secrets = [
            (_core(secret), sorted(secret_forms(secret), key=len, reverse=True))
            for secret in sorted(kept, key=len, reverse=True)
        ]

    def __call__(self, text: str) -> str:
        # Every form holds its secret's core verbatim: a line without it (nearly every line)
        # costs one search per secret, not one per form.
        hits = [forms for core, forms in self._secrets if core in text]
        for forms in hits:
            for form in forms:
                text = text.replace(form, "[REDACTED]")
        return text


def _core(secret: str) -> str:
    """The longest run of the secret that no form escapes (letters, digits, "-._~")."""
    return max(_UNESCAPED.findall(secret), key=len, default="")


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


def setup_logging(level: str, fmt: str, secrets: Iterable[str] = ()) -> None:
    """Configure the root logger for the daemon (stderr, so journald collects it)."""
    handler = logging.StreamHandler(sys.stderr)
    redact = Redactor(secrets)
    if fmt == "auto":
        fmt = "text" if sys.stderr.isatty() else "json"
    handler.setFormatter(JsonFormatter(redact) if fmt == "json" else TextFormatter(redact))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Library chatter at INFO would log every HTTP request (and aiohttp URLs hold the bot token).
    for noisy in ("aiogram", "aiohttp", "httpx", "httpx2", "anthropic", "mcp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
