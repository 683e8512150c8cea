"""A secret is redacted in the forms the code between it and a log line writes it: percent-
encoded in a URL or a form, quoted by repr(), escaped by JSON (the log format under systemd)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
from urllib.parse import quote, quote_plus, urlencode

import aiohttp
import pytest
from aiosmtplib.auth import auth_plain_encode
from yarl import URL

from agentd.config import Config, MailAccountConfig
from agentd.daemon.startup import set_up_logging
from agentd.runtime.logs import JsonFormatter, TextFormatter
from agentd.runtime.redact import Redactor, login_forms
from agentd.tools.capability import Context

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


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_secret_learned_after_start_is_hidden_by_the_log_and_the_journal_alike(
    restore_logging: None, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """One redactor: what `agentd run` hands the engine is the log's, so a value it learns
    (a Matrix login's token) is gone from both at once."""
    token = "syt_Ym90_learnedAtRunTime_0a1b2c"
    redactor = set_up_logging(_mail_config(fmt))
    assert redactor.learn([token]) == 1
    logging.getLogger("agentd.matrix").warning("sync failed", extra={"error": f"Bearer {token}"})
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "Bearer [REDACTED]" in line and token not in line, line
    assert redactor(f"step failed: {token!r}") == "step failed: '[REDACTED]'"


def test_a_percent_encoding_in_lower_case_hex_is_redacted_too() -> None:
    """ "%2b" and "%2B" are the same URL; some clients and servers write the lower case."""
    redact = Redactor([QUERY_TOKEN])
    upper = quote(QUERY_TOKEN, safe="")
    lower = re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), upper)
    assert lower != upper
    plus = re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), quote_plus(QUERY_TOKEN))
    for written in (lower, plus):
        assert redact(f"GET /v1?token={written}&x=1") == "GET /v1?token=[REDACTED]&x=1"


def test_learned_values_are_capped_the_oldest_forgotten_and_lasting_ones_kept() -> None:
    redact = Redactor(["configured-0001"], max_learned=2)
    redact.learn(["derived-form-01"], lasting=True)
    assert redact.learn(["cookie-000001", "short", "cookie-000002"]) == 2
    assert redact.learn(["cookie-000001"]) == 0  # met again: now the newest
    assert redact.learn(["cookie-000003"]) == 1  # cookie-000002 goes
    text = "configured-0001 derived-form-01 cookie-000001 cookie-000002 cookie-000003 short"
    assert redact(text) == ("[REDACTED] [REDACTED] [REDACTED] cookie-000002 [REDACTED] short")
    assert redact.learned == 2


def test_base64_logins_are_redacted_as_the_clients_send_them() -> None:
    """HTTP Basic as aiohttp (in both its encodings), urllib (a calendar feed) and niquests
    (caldav's client) write it, and SMTP's AUTH PLAIN and LOGIN as aiosmtplib does: none
    holds a run of the password."""
    import niquests.auth
    from aiosmtplib.auth import auth_login_encode

    user, password = "me@example.com", "pässword-42"
    redact = Redactor([password])
    redact.learn(login_forms(user, password), lasting=True)
    written = [
        aiohttp.encode_basic_auth(user, password),
        aiohttp.encode_basic_auth(user, password, encoding="latin-1"),
        niquests.auth._basic_auth_str(user, password),
        "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode(),  # urllib's
        "AUTH PLAIN " + auth_plain_encode(user, password).decode(),
        "AUTH LOGIN " + auth_login_encode(user, password)[1].decode(),
    ]
    for text in written:
        assert redact(f"sent {text!r}").endswith(" [REDACTED]'"), text


@pytest.mark.parametrize("user", ["a", "ab", "abc", "ci-robot@example.org", "zoë"])
def test_http_basic_as_a_user_agentd_does_not_know_is_redacted(user: str) -> None:
    """An automation calls an API as a user of its own: no form listed beforehand holds that
    base64 (each user length shifts the password's bytes in it), so what a client writes is
    decoded and hidden when it holds a known secret: configured, or learned later."""
    import niquests.auth

    learned = "learned-token-5c4b3a"
    redact = Redactor([PASSWORD])
    redact.learn([learned])
    for secret in (PASSWORD, learned):
        written = [
            aiohttp.encode_basic_auth(user, secret),
            aiohttp.encode_basic_auth(user, secret, encoding="latin-1"),
            niquests.auth._basic_auth_str(user, secret),
            "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode().rstrip("="),
        ]
        for text in written:
            line = f"sent {{'Authorization': {text!r}}}"
            assert redact(line) == f"sent {{'Authorization': '{text[:6]}[REDACTED]'}}", text
    # Credentials that hold no known secret, and the word itself, are left as they are.
    other = aiohttp.encode_basic_auth(user, "not-a-known-one")
    for text in (f"Authorization: {other}", "basic search, Basic !!"):
        assert redact(text) == text


def test_the_calendar_and_mail_capabilities_teach_their_logins_base64_forms() -> None:
    from agentd.calendar import capability as calendar
    from agentd.mail import capability as mail

    config = Config.model_validate(
        {
            "calendar": [
                {
                    "name": "home",
                    "url": "https://dav.example/cal/",
                    "username": "me",
                    "password_env": "CAL_PASSWORD",
                }
            ],
            "mail": [
                {"address": "me@example.com", "password_env": "MAIL_PASSWORD", "imap_host": "i"}
            ],
        }
    )
    env = {"CAL_PASSWORD": "cal-secret-77", "MAIL_PASSWORD": PASSWORD}
    redactor = Redactor(env.values())

    async def build() -> None:
        async with contextlib.AsyncExitStack() as stack:
            ctx = Context(
                config=config,
                secrets=config.secret_source(env),
                db=None,
                clock=None,  # type: ignore[arg-type]
                engine=None,  # type: ignore[arg-type]
                outbox=None,
                llm=None,
                redactor=redactor,
                stack=stack,
            )
            for cap in (calendar.capability(), mail.capability()):
                await cap.contribute(ctx)

    asyncio.run(build())
    basic = aiohttp.encode_basic_auth("me", "cal-secret-77")
    assert redactor(f"Authorization: {basic}") == "Authorization: Basic [REDACTED]"
    plain = auth_plain_encode("me@example.com", PASSWORD).decode()
    assert redactor(f"AUTH PLAIN {plain}") == "AUTH PLAIN [REDACTED]"


def _b64(raw: str) -> str:
    return base64.b64encode(raw.encode()).decode()


@pytest.mark.parametrize(
    "written",
    [
        # An HTTP auth scheme is case-insensitive (RFC 9110 §11.1), one space or more.
        "basic " + _b64(f"ci-robot:{PASSWORD}"),
        "BASIC " + _b64(f"ci-robot:{PASSWORD}"),
        "bAsIc  " + _b64(f"ci-robot:{PASSWORD}"),
        # SMTP's AUTH and IMAP's AUTHENTICATE with an initial response, as a protocol log or
        # an error that quotes the command writes them, for a login agentd was never told.
        "AUTH PLAIN " + auth_plain_encode("someone@else.example", PASSWORD).decode(),
        "auth plain " + _b64(f"admin\0someone\0{PASSWORD}"),  # with an authorization id
        "A001 AUTHENTICATE PLAIN " + _b64(f"\0someone\0{PASSWORD}"),
        "AUTH XOAUTH2 " + _b64(f"user=someone\x01auth=Bearer {PASSWORD}\x01\x01"),
        # A character whose lower case is longer (İ) before the credential.
        "İstanbul: BASIC " + _b64(f"ci-robot:{PASSWORD}"),
    ],
)
def test_a_base64_credential_in_any_case_and_smtp_auth_lines_are_redacted(written: str) -> None:
    """The credential holds no run of the secret and names a user agentd does not know, so
    only decoding it finds the secret: whatever case the scheme or command is written in."""
    redact = Redactor([PASSWORD])
    token = written.rsplit(" ", 1)[1]
    line = redact(f"sent {written!r} -> 535")
    assert token not in line and line.endswith(" [REDACTED]' -> 535"), line


def test_words_that_open_no_credential_are_left_alone() -> None:
    redact = Redactor([PASSWORD])
    for text in (
        "AUTH PLAIN failed: 535 authentication credentials invalid",
        "Authorization: Basic " + _b64("ci-robot:not-a-known-one"),
        "authenticate once, basically",
    ):
        assert redact(text) == text
