"""`agentd init`'s key check: a wrong base URL is not blamed on the key, the
questions end, and Ctrl-C after pairing keeps the pairing."""

from __future__ import annotations

import stat
from pathlib import Path

import pexpect
import pytest

from agentd.channels import load_config
from tests.daemon_process import API_KEY, OWNER, TOKEN
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.test_init import AGENTD, clean_env


@pytest.fixture
def fakes() -> tuple[FakeTelegram, FakeAnthropic]:
    with FakeTelegram.running(token=TOKEN) as tg, FakeAnthropic.running(api_key=API_KEY) as llm:
        yield tg, llm


def spawn(tmp_path: Path, tg: FakeTelegram, llm_url: str) -> pexpect.spawn:
    args = ["init", "--dir", str(tmp_path), "--api-base", tg.base_url, "--llm-base-url", llm_url]
    return pexpect.spawn(
        AGENTD[0],
        [*AGENTD[1:], *args],
        env=clean_env(),
        encoding="utf-8",
        timeout=90,
        dimensions=(40, 100),
    )


def pair(child: pexpect.spawn, tg: FakeTelegram) -> None:
    """Pair as the owner; a bare /start first gets a hint, the code a confirmation (neither
    is met with silence)."""
    child.expect("Bot token")
    child.sendline(TOKEN)
    child.expect(r"/start ([A-Z0-9]{4}-[A-Z0-9]{4})")
    code = child.match.group(1)
    tg.add_message(OWNER, OWNER, "/start")
    hint = tg.wait_for_sent(1, timeout=30)[0]
    assert hint["chat_id"] == OWNER and "not the code" in hint["plain_text"]
    tg.add_message(OWNER, OWNER, f"/start {code}")
    child.expect(rf"user id {OWNER}")
    assert "Paired" in tg.wait_for_sent(2, timeout=30)[1]["plain_text"]


def test_a_wrong_base_url_is_said_once_not_blamed_on_the_key(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    child = spawn(tmp_path, tg, f"{llm.base_url}/not-the-api")
    try:
        pair(child, tg)
        child.expect("Anthropic API key")
        child.sendline("")  # an empty key is the key's fault: asked again
        child.expect("the key is empty")
        child.expect("Anthropic API key")
        child.sendline(API_KEY)
        child.expect("does not answer like the Anthropic API")
        child.expect("llm-base-url")
        child.expect(pexpect.EOF)  # not asked again: another key cannot fix a wrong URL
    finally:
        child.close()
    assert child.exitstatus == 78
    assert "does not exist for this key" not in (child.before or "")
    # The pairing done before the failure is kept.
    assert load_config(tmp_path / "agentd.toml", env={}).access.allowed_user_ids == [OWNER]


def test_ctrl_c_at_the_key_keeps_the_pairing_and_a_rerun_finishes(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    child = spawn(tmp_path, tg, llm.base_url)
    try:
        pair(child, tg)
        child.expect("Anthropic API key")
        child.sendintr()
        child.expect("Kept the pairing")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 130
    secrets_file = tmp_path / "agentd.env"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    config = load_config(tmp_path / "agentd.toml", env={})
    assert config.access.allowed_user_ids == [OWNER] and config.secrets.anthropic_api_key is None
    # The re-run it suggests skips pairing and reads the token back: only the key is asked.
    args = [
        "init",
        "--dir",
        str(tmp_path),
        "--owner-id",
        str(OWNER),
        "--force",
        "--api-base",
        tg.base_url,
        "--llm-base-url",
        llm.base_url,
    ]
    child = pexpect.spawn(
        AGENTD[0],
        [*AGENTD[1:], *args],
        env=clean_env(),
        encoding="utf-8",
        timeout=90,
        dimensions=(40, 100),
    )
    try:
        child.expect("Bot token ok")
        child.expect("Anthropic API key")
        child.sendline(API_KEY)
        child.expect("Anthropic key ok")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    config = load_config(tmp_path / "agentd.toml", env={})
    assert config.secrets.anthropic_api_key is not None
    assert config.access.allowed_user_ids == [OWNER]
