"""The configuration's rules: one path rule (relative to the config file's folder, whatever
the working directory), old spellings still load with one warning, and every secret (hook
secrets and the web-search key included) is read by the one reader."""

from __future__ import annotations

import hashlib
import hmac
import logging
from pathlib import Path

import pytest

from agentd.channels import load_config
from agentd.config import Config, SecretSource
from agentd.config.schema import OLD_SPELLINGS
from agentd.db import Database
from agentd.durable import FakeClock
from agentd.telegram.config import bot_token
from agentd.web import build_web_tools


def write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "agentd.toml"
    path.write_text(text)
    return path


def test_the_automations_folder_is_beside_the_config_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "home", '[automations]\nfolder = "flows"\n')
    monkeypatch.chdir(tmp_path)
    config = load_config(path, {})
    assert config.automations.folder == str(tmp_path / "home" / "flows")
    monkeypatch.chdir(tmp_path / "home")
    assert load_config("agentd.toml", {}).automations.folder == config.automations.folder


def test_every_path_is_stored_absolute_in_one_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(
        tmp_path,
        '[tools.workspace]\npath = "ws/../ws"\n[skills]\npaths = ["a"]\n'
        '[media]\noutgoing_dir = "out"\n',
    )
    monkeypatch.chdir(tmp_path)
    config = load_config("agentd.toml", {})  # found by a relative name
    assert config.source == str(tmp_path / "agentd.toml")
    assert config.tools.workspace.path == str(tmp_path / "ws")
    assert config.skill_dirs == [tmp_path / "a"]
    assert config.outgoing_dir == tmp_path / "out"
    assert config.db_path == tmp_path / "agentd.db"


def test_an_old_key_loads_with_one_warning_naming_what_to_do(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert "startup.lazy_anthropic" in OLD_SPELLINGS
    path = write(tmp_path, "[startup]\nlazy_anthropic = true\nlazy_aiogram = false\n")
    with caplog.at_level(logging.WARNING, logger="agentd"):
        config = load_config(path, {})
    assert config.startup.lazy_aiogram is False
    said = [r.getMessage() for r in caplog.records if "configuration key" in r.getMessage()]
    assert len(said) == 1 and "startup.lazy_anthropic" in said[0] and "delete it" in said[0]


@pytest.mark.parametrize(("old", "new"), [("web", "tools.web"), ("hooks", "automations.hooks")])
def test_a_moved_section_loads_with_one_warning_naming_the_new_spelling(
    old: str, new: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"web": 'provider = "tavily"', "hooks": 'listen = "127.0.0.1:9999"'}[old]
    path = write(tmp_path, f"[{old}]\n{body}\n")
    with caplog.at_level(logging.WARNING, logger="agentd"):
        config = load_config(path, {})
    said = [r.getMessage() for r in caplog.records if "configuration key" in r.getMessage()]
    assert said == [f"configuration key [{old}] is now spelled [{new}]; rename it"]
    assert config.web.provider == "tavily" if old == "web" else config.hooks.listen.endswith("9999")
    assert config.web is config.tools.web and config.hooks is config.automations.hooks


async def test_a_web_search_key_held_as_a_credential_is_used(tmp_path: Path) -> None:
    (tmp_path / "TAVILY_API_KEY").write_text("tvly-from-credential\n")
    config = Config.model_validate({"tools": {"web": {"provider": "tavily"}}})
    source = config.secret_source({"CREDENTIALS_DIRECTORY": str(tmp_path)})
    db = await Database.open(tmp_path / "t.db")
    try:
        tools, problems = build_web_tools(config, source, db, FakeClock())
    finally:
        await db.close()
    assert problems == [] and [t.name for t in tools] == ["web_search"]


async def test_a_hook_secret_in_agentd_env_is_used(tmp_path: Path) -> None:
    """docs/workflows.md says to put it in agentd.env: the listener must not answer 503."""
    import aiohttp

    from tests.test_hooks import hooks_running

    sock = tmp_path / "hooks.sock"
    home = tmp_path / "home"
    path = write(
        home,
        f"[access]\nallowed_user_ids = [42]\n"
        f'[automations.hooks]\nenabled = true\nlisten = "unix:{sock}"\n'
        '[automations.hooks.routes.u]\nworkflow = "unit_wait"\nsecret_env = "UNIT_SECRET"\n',
    )
    (home / "agentd.env").write_text("UNIT_SECRET=from-the-file-1\n")
    (home / "agentd.env").chmod(0o600)
    config = load_config(path, {})
    body = b'{"x": 1}'
    signature = "sha256=" + hmac.new(b"from-the-file-1", body, hashlib.sha256).hexdigest()
    async with hooks_running(config, tmp_path / "t.db", {}):
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(sock))) as h:
            async with h.post(
                "http://hooks/hooks/u", data=body, headers={"X-Signature-256": signature}
            ) as response:
                assert response.status == 202, await response.text()


def test_a_secret_source_is_the_environment_then_the_file() -> None:
    source = SecretSource({"A": "env"}, {"A": "file", "B": "file"})
    assert dict(source) == {"A": "env", "B": "file"}
    assert "C" not in source


@pytest.mark.parametrize("name", ["TELEGRAM_BOT_TOKEN", "ANTHROPIC_API_KEY"])
@pytest.mark.parametrize("where", ["environment", "agentd.env", "credential"])
def test_the_model_key_and_the_bot_token_load_from_each_source(
    name: str, where: str, tmp_path: Path
) -> None:
    """The model key is the core's, read at load; the bot token Telegram's, read when asked."""
    path = write(tmp_path / "home", "")
    creds = tmp_path / "creds"
    creds.mkdir()
    env = {"CREDENTIALS_DIRECTORY": str(creds)}
    value = f"{where}-value-{name.lower()}"
    if where == "environment":
        env[name] = value
    elif where == "agentd.env":
        (path.parent / "agentd.env").write_text(f"{name}={value}\n")
        (path.parent / "agentd.env").chmod(0o600)
    else:
        (creds / name.lower()).write_text(value + "\n")  # systemd's lower-case credential name
    config = load_config(path, env)
    held = (
        bot_token(config, env) if name == "TELEGRAM_BOT_TOKEN" else config.secrets.anthropic_api_key
    )
    assert held is not None and held.get_secret_value() == value


@pytest.mark.parametrize("name", ["Mars/Olympus", "Europe", "../etc/passwd", "Europe/" + "x" * 300])
async def test_one_reader_refuses_a_zone_the_same_way_in_the_config_and_the_tool(
    name: str,
) -> None:
    from pydantic import ValidationError

    from agentd.tools import ToolContext, execute
    from agentd.tools.builtin import current_time

    calendar = {"url": "https://cal.example/feed.ics", "timezone": name}
    for section in ({"agent": {"timezone": name}}, {"calendar": [calendar]}):
        with pytest.raises(ValidationError, match=r"unknown time zone .*'Europe/Berlin'"):
            Config.model_validate(section)
    ctx = ToolContext(chat_id=1, user_id=1, instance_id="i", chat_kind="private")
    said = await execute(current_time, ctx, {"timezone": name})
    assert not said.ok and "Unknown time zone" in said.content and "Europe/Berlin" in said.content
