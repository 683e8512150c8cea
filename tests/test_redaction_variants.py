"""A secret is redacted in the forms the code between it and a log line writes it: percent-
encoded in a URL or a form, quoted by repr(), escaped by JSON (the log format under systemd)."""

from __future__ import annotations

import json
import logging
from urllib.parse import quote, quote_plus, urlencode

import pytest
from yarl import URL

from agentd.config import Config, MailAccountConfig
from agentd.daemon.startup import set_up_logging
from agentd.runtime.logs import JsonFormatter, Redactor, TextFormatter

QUERY_TOKEN = "q9X+3kLm/Vw7Zt8RpA2b=="  # a base64 token, as many APIs issue them
PASSWORD = 'Tr0ub4dor"&3\\horse'  # a double quote and a backslash
QUOTED = "it's a s3cret/key with space"  # a single quote, a slash, spaces


@pytest.mark.parametrize(
    "written",
    [
        QUERY_TOKEN,
        quote(QUERY_TOKEN, safe=""),
        quote(QUERY_TOKEN),
        quote_plus(QUERY_TOKEN),
        urlencode({"token": QUERY_TOKEN}).partition("=")[2],
        URL("http://h/").with_query(token=QUERY_TOKEN).raw_query_string.partition("=")[2],
        URL("http://h/").with_path(f"/v1/{QUERY_TOKEN}").raw_path.removeprefix("/v1/"),
    ],
)
def test_a_token_is_redacted_however_a_url_encodes_it(written: str) -> None:
    redact = Redactor([QUERY_TOKEN])
    text = redact(f"GET https://api.example/v1/me?token={written}&page=2 -> 401")
    assert text == "GET https://api.example/v1/me?token=[REDACTED]&page=2 -> 401"


@pytest.mark.parametrize("secret", [PASSWORD, QUOTED])
def test_a_secret_is_redacted_in_a_repr_and_in_json(secret: str) -> None:
    redact = Redactor([secret])
    for text in (
        repr(PermissionError(f"login refused for {secret!r}")),  # repr of a repr
        f"login refused for password={secret!r}",
        repr(f"{secret} and a quote ' and \""),  # repr() picks the other quote
        json.dumps({"password": secret}),
        json.dumps({"password": secret}, ensure_ascii=True),
        f"{secret} as {quote_plus(secret)}",
    ):
        assert "[REDACTED]" in redact(text)
        left = redact(text)
        assert "Tr0ub4dor" not in left and "s3cret" not in left, (text, left)


def test_a_short_value_is_left_alone_and_a_secret_holding_another_goes_whole() -> None:
    redact = Redactor(["abc12", "key-123456", "key-123456-extra"])
    assert redact("abc12 key-123456-extra key-123456") == "abc12 [REDACTED] [REDACTED]"
    assert Redactor([])("nothing to hide") == "nothing to hide"


def test_a_secret_of_symbols_only_is_still_redacted() -> None:
    redact = Redactor(["!@#$%^&*()"])
    encoded = "%21%40%23%24%25%5E%26%2A%28%29"
    assert redact(f"pw=!@#$%^&*() or {encoded}") == "pw=[REDACTED] or [REDACTED]"


@pytest.fixture
def restore_logging():  # type: ignore[no-untyped-def]
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _mail_config(fmt: str) -> Config:
    config = Config(
        mail=[
            MailAccountConfig(
                address="me@example.com", password_env="MAIL_PASSWORD", imap_host="imap.example"
            )
        ]
    )
    config.stored_secrets["MAIL_PASSWORD"] = PASSWORD
    config.log.format = fmt
    return config


@pytest.mark.parametrize("fmt", ["json", "text"])
@pytest.mark.parametrize("how", ["extra", "repr extra", "traceback", "message", "nested"])
def test_the_daemons_log_never_carries_the_password(
    restore_logging: None, capsys: pytest.CaptureFixture[str], fmt: str, how: str
) -> None:
    """The logging `agentd run` sets up, in both formats (json is systemd's)."""
    set_up_logging(_mail_config(fmt))
    log = logging.getLogger("agentd.mail")
    if how == "extra":
        log.warning("mail login failed", extra={"error": f"refused {PASSWORD}"})
    elif how == "repr extra":
        log.warning("mail login failed", extra={"error": repr(PermissionError(PASSWORD))})
    elif how == "message":
        log.warning("mail login failed for %r", PASSWORD)
    elif how == "nested":
        log.warning("mail login failed", extra={"detail": {"tried": [PASSWORD], PASSWORD: 1}})
    else:
        try:
            raise PermissionError(f"LOGIN refused for {PASSWORD!r}")
        except PermissionError:
            log.exception("mail check failed")
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "[REDACTED]" in line and "Tr0ub4dor" not in line, line
    if fmt == "json":
        json.loads(line)


def test_a_json_line_keeps_its_fields_and_types() -> None:
    record = logging.makeLogRecord(
        {"msg": "sent %s", "args": ("k-123456",), "chat_id": 42, "ids": (1, "k-123456"), "o": 1.5}
    )
    entry = json.loads(JsonFormatter(Redactor(["k-123456"])).format(record))
    assert entry["event"] == "sent [REDACTED]" and entry["chat_id"] == 42
    assert entry["ids"] == [1, "[REDACTED]"] and entry["o"] == 1.5


def test_an_object_in_a_json_line_is_redacted_as_text() -> None:
    class Holder:
        def __str__(self) -> str:
            return "holder of k-123456"

    record = logging.makeLogRecord({"msg": "x", "holder": Holder()})
    entry = json.loads(JsonFormatter(Redactor(["k-123456"])).format(record))
    assert entry["holder"] == "holder of [REDACTED]"
    text = TextFormatter(Redactor(["k-123456"])).format(record)
    assert "k-123456" not in text


def test_a_number_valued_extra_holding_a_secret_is_redacted_too() -> None:
    """A PIN configured as a secret, logged as a number: no string field holds it, the line
    does."""
    record = logging.makeLogRecord({"msg": "checked", "pin": 47114711})
    line = JsonFormatter(Redactor(["47114711"])).format(record)
    assert "47114711" not in line and json.loads(line)["pin"] == "[REDACTED]"
