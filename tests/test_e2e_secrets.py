"""End to end through `agentd run`: a secret stays out of the journal, the audit log, the log
(JSON, as under systemd) and the owner's chat in the forms code writes it: percent-encoded
in a URL by the HTTP client, quoted by repr() in an exception; and a model provider's key is
hidden like Anthropic's."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from tests.daemon_process import OWNER, TOKEN, Daemon, daemon_env, running_daemon
from tests.db_scan import rows_holding
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.openai_chat import FakeChat
from tests.test_e2e_automations import FLOWS

QUERY_TOKEN = "q9X+3kLm/Vw7Zt8RpA2b=="  # a base64 token, as many APIs issue them
PASSWORD = 'Tr0ub4dor"&3\\horse'  # a double quote and a backslash
PROVIDER_KEY = "sk-or-v1-TESTsecretPROVIDERkey0123456789"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeTelegram, Daemon]]:
    tmp = tmp_path_factory.mktemp("e2e_secrets")
    (tmp / "agentd.toml").write_text(
        f'[automations]\nfolder = "{FLOWS}"\nsecrets = ["TEST_QUERY_TOKEN", "TEST_PASSWORD"]\n'
    )
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            TEST_QUERY_TOKEN=QUERY_TOKEN,
            TEST_PASSWORD=PASSWORD,
            AGENTD_LOG__FORMAT="json",  # what a systemd unit gets (stderr is no tty)
        )
        with running_daemon(tmp, env) as daemon:
            daemon.fake_llm = llm  # type: ignore[attr-defined]  # what the model was sent
            yield tg, daemon


def _fail(daemon: Daemon, name: str, url: str = "") -> str:
    """The error the instance ended with (its failure notice and audit row written)."""
    started = daemon.cli_json("workflows", "start", name, "--input", json.dumps({"url": url}))
    iid = started["instance_id"]
    deadline = time.monotonic() + 60
    sql = "SELECT status, error FROM workflow_instances WHERE id = ?"
    while (row := daemon.query(sql, (iid,))[0])[0] not in ("errored", "failed", "complete"):
        assert time.monotonic() < deadline, row
        time.sleep(0.1)
    assert row[0] != "complete"
    daemon.wait_idle(timeout=60)
    return str(row[1])


def _nowhere(tg: FakeTelegram, daemon: Daemon, forms: set[str]) -> None:
    for form in forms:
        assert rows_holding(daemon.db_path, form) == [], form
        assert form not in daemon.log(), form
        assert not [m for m in tg.sent if form in m["plain_text"]], form


def test_a_token_percent_encoded_in_a_url_is_redacted(stack: tuple[FakeTelegram, Daemon]) -> None:
    tg, daemon = stack
    encoded = URL("http://h/").with_query(token=QUERY_TOKEN).raw_query_string.partition("=")[2]
    assert encoded != QUERY_TOKEN  # '+' and '=' as aiohttp writes them
    error = _fail(daemon, "secret_in_query", f"{tg.base_url}/no-such-api/lookup")
    assert "404" in error and "token=[REDACTED]" in error
    _nowhere(tg, daemon, {QUERY_TOKEN, encoded})


def test_a_password_quoted_by_repr_is_redacted(stack: tuple[FakeTelegram, Daemon]) -> None:
    tg, daemon = stack
    error = _fail(daemon, "secret_in_repr")
    assert "login refused for password='[REDACTED]'" in error
    as_repr = repr(PASSWORD)[1:-1]  # the backslash doubled
    _nowhere(tg, daemon, {PASSWORD, as_repr, json.dumps(PASSWORD)[1:-1], json.dumps(as_repr)[1:-1]})


def test_a_password_sent_as_http_basic_by_an_unknown_user_is_redacted(
    stack: tuple[FakeTelegram, Daemon],
) -> None:
    """An automation's API call with Basic auth as a user agentd was never told of: the
    error quoting the request's headers holds base64, no run of the password."""
    tg, daemon = stack
    error = _fail(daemon, "secret_in_basic_auth", f"{tg.base_url}/no-such-api/lookup")
    assert "404 from" in error and "'Authorization': 'Basic [REDACTED]'" in error, error
    basic = aiohttp.encode_basic_auth("ci-robot", PASSWORD).removeprefix("Basic ")
    _nowhere(tg, daemon, {basic, PASSWORD})


def test_an_automation_quoting_its_secret_to_the_owner_sends_it_redacted(
    stack: tuple[FakeTelegram, Daemon],
) -> None:
    """The code holds its secrets and may put one in what it tells or asks the owner or the
    model (an API's error naming the URL it called): the chat, the database and the model
    get it redacted."""
    tg, daemon = stack
    llm: FakeAnthropic = daemon.fake_llm  # type: ignore[attr-defined]
    llm.enqueue_tool_use("answer", {"ok": False})
    url = f"{tg.base_url}/no-such-api/lookup"
    started = daemon.cli_json(
        "workflows", "start", "secret_in_notice", "--input", json.dumps({"url": url})
    )
    sql = "SELECT status FROM workflow_instances WHERE id = ?"
    deadline = time.monotonic() + 60
    while daemon.query(sql, (started["instance_id"],))[0][0] != "complete":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    daemon.wait_idle(timeout=60)
    told = [m["plain_text"] for m in tg.sent if "The lookup failed" in m["plain_text"]]
    asked = [m["plain_text"] for m in tg.sent if m["plain_text"].startswith("Retry with")]
    assert told and "token was [REDACTED]" in told[0], told
    assert asked and asked[0].startswith("Retry with [REDACTED]?"), asked
    [judged] = [r for r in llm.requests if "worth a retry" in json.dumps(r["body"])]
    assert "(token [REDACTED])" in json.dumps(judged["body"]) and QUERY_TOKEN not in str(judged)
    _nowhere(tg, daemon, {QUERY_TOKEN})


def test_a_providers_key_echoed_by_its_server_is_nowhere(tmp_path: Path) -> None:
    """An OpenAI-compatible server refusing the key quotes it back; neither the log nor the
    database holds it."""
    (tmp_path / "agentd.toml").write_text(
        """
[llm]
model = "router/some-model"
retries = 0
[llm.providers.router]
kind = "openai"
base_url = "{url}/v1"
api_key_env = "OPENROUTER_API_KEY"
"""
    )
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as claude,
        FakeChat.running() as chat,
    ):
        config = tmp_path / "agentd.toml"
        config.write_text(config.read_text().replace("{url}", chat.base_url))
        for _ in range(10):
            chat.enqueue_error(401, f"Incorrect API key: {PROVIDER_KEY}", code="invalid_api_key")
        env = daemon_env(
            tmp_path,
            tg.base_url,
            claude.base_url,
            AGENTD_CONFIG=str(config),
            OPENROUTER_API_KEY=PROVIDER_KEY,
        )
        env.pop("ANTHROPIC_API_KEY")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "hello")
            tg.wait_for_sent(1, timeout=60)
            daemon.wait_idle(timeout=60)
            assert chat.requests and chat.requests[0]["auth"] == f"Bearer {PROVIDER_KEY}"
            _nowhere(tg, daemon, {PROVIDER_KEY})


def test_the_status_line_systemd_shows_is_redacted_like_the_log(tmp_path: Path) -> None:
    """`systemctl status` shows the STATUS= line agentd sends while it waits for Telegram: a
    server error quoting the bot token there is redacted as in the log."""
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # what systemd listens on
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(30)
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm, notify:
        tg.fail_next("getMe", 502, f"Bad Gateway: upstream refused {TOKEN}")
        env = daemon_env(
            tmp_path, tg.base_url, llm.base_url, NOTIFY_SOCKET=str(notify.getsockname())
        )
        with running_daemon(tmp_path, env) as daemon:
            said: list[str] = []
            while "READY=1" not in said:
                said.append(notify.recv(4096).decode())
            log = daemon.log()
    [waiting] = [s for s in said if s.startswith("STATUS=waiting for Telegram")]
    assert "upstream refused [REDACTED]" in waiting and TOKEN not in waiting, waiting
    assert "upstream refused [REDACTED]" in log and TOKEN not in log
