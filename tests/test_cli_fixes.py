"""The CLI a new owner meets: each rough edge they could hit, checked."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentd.cli.app import app
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.durable import store
from tests.fakes import FakeAnthropic, FakeTelegram

TOKEN = "123456:TEST-token-abcdef"
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AGENTD_CONFIG", "")  # restored after the test: --config may set it


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "agentd.toml"
    path.write_text(
        f'[storage]\npath = "{tmp_path / "agentd.db"}"\n[access]\nallowed_user_ids = [42]\n'
    )
    return path


@pytest.fixture
def database(tmp_path: Path, config: Path) -> Iterator[object]:
    conn = open_sync(tmp_path / "agentd.db")
    apply_migrations(conn)
    yield conn
    conn.close()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_version_flag_and_config_before_the_subcommand(config: Path, database: object) -> None:
    assert invoke("--version") == (0, "agentd 0.1.0\n")
    code, output = invoke("--config", str(config), "history", "--json")
    assert (code, json.loads(output)) == (0, [])
    code, output = invoke("--config", str(config.parent / "nope.toml"), "history")
    assert code == 78 and "nope.toml does not exist" in output


def test_usage_errors_exit_2_and_invalid_config_exits_78(tmp_path: Path) -> None:
    assert invoke("history", "--limit", "many")[0] == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[llm]\nmax_steps = 0\n")
    code, output = invoke("history", "--config", str(bad))
    assert code == 78 and "llm.max_steps" in output


def test_a_bad_env_override_names_the_variable_and_the_syntax(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTD_ACCESS__ALLOWED_USER_IDS", "42,43")
    code, output = invoke("history", "--config", str(config))
    assert code == 78
    assert "AGENTD_ACCESS__ALLOWED_USER_IDS" in output and "[42]" in output
    assert str(config) not in output.replace("\n", "")  # not blamed on the file


def test_wrong_inputs_do_not_exit_0(tmp_path: Path, config: Path, database: object) -> None:
    code, output = invoke("ingest", str(tmp_path / "nonexistent"), "--config", str(config))
    assert code == 1 and "not found" in output
    assert invoke("workflows", "ls", "--status", "bogus", "--config", str(config))[0] == 2
    code, output = invoke("audit", "--kind", "nonsense", "--config", str(config))
    assert code == 2 and "access_denied" in output
    assert "access_denied" in invoke("audit", "--help")[1]

    now = time.time()
    conn = database
    store.insert_instance(
        conn,
        instance_id="done-1",
        workflow="turn",
        key="chat-1",  # type: ignore[arg-type]
        input_json="{}",
        now=now,
    )
    store.set_status(conn, "done-1", "complete", now)  # type: ignore[arg-type]
    code, output = invoke("workflows", "cancel", "done-1", "--config", str(config))
    assert code == 1 and "already finished (complete)" in output


def test_a_missing_database_names_its_path_and_why(tmp_path: Path) -> None:
    relative = tmp_path / "rel.toml"
    relative.write_text('[storage]\npath = "state/agentd.db"\n')
    code, output = invoke("history", "--config", str(relative))
    flat = output.replace("\n", "")
    # Relative to the config file's folder, as agentd.env is; the file is named.
    assert code == 1 and str(tmp_path / "state" / "agentd.db") in flat
    assert f"storage.path in {relative}" in flat


def test_tables_keep_timestamps_whole_at_80_columns(config: Path, database: object) -> None:
    from agentd.ledger import audit

    audit.record(
        database,
        "access_denied",
        chat_id=-1001234567890,
        user_id=987654321,
        detail={"update_kind": "message", "update_id": 123456789},
    )
    result = runner.invoke(app, ["audit", "--config", str(config)], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", result.output), result.output
    assert "-1001234567890" in result.output and "…" not in result.output
    # The user id is shown whole, or its column is said to be left out (never cut).
    assert "987654321" in result.output or "left out at this width: instance, user" in (
        result.output.replace("\n", " ")
    )


def test_run_with_an_empty_allowlist_refuses_at_once(tmp_path: Path) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text(f'[storage]\npath = "{tmp_path / "x.db"}"\n')
    code, output = invoke("run", "--config", str(empty))
    assert code == 78 and "allowed_user_ids is empty" in output and "agentd pair" in output
    assert not (tmp_path / "x.db").exists()
    # A pairing code waiting to be used is reason enough to start (here: to need a token).
    assert invoke("pair", "--no-wait", "--config", str(empty))[0] == 0
    code, output = invoke("run", "--config", str(empty))
    assert code == 78 and "is not set; export it" in output  # the missing secrets come next


def test_doctor_says_ok_plainly_and_checks_allowlist_and_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "agentd.db"
    conn = open_sync(db)
    apply_migrations(conn)
    conn.close()
    os.chmod(db, 0o600)
    # Like Anthropic's API, the fake refuses a model it does not know.
    with FakeTelegram.running() as tg, FakeAnthropic.running(refuse_unknown_models=True) as llm:
        cfg = tmp_path / "doctor.toml"
        cfg.write_text(
            f'[storage]\npath = "{db}"\n[telegram]\napi_base = "{tg.base_url}"\n'
            f'[llm]\nbase_url = "{llm.base_url}"\nmodel = "claude-haiku-4-7"\n'
        )
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        code, output = invoke("doctor", "--json", "--config", str(cfg))
        checks = {c["check"]: c for c in json.loads(output)}
        assert code == 1
        assert checks["database"]["ok"] and "chmod" not in checks["database"]["detail"]
        assert not checks["telegram"]["ok"]  # no token …
        assert not checks["allowlist"]["ok"]  # … and the allowlist is still checked
        model = checks["model"]
        assert not model["ok"] and "claude-haiku-4-7" in model["detail"]
        # The check `agentd init` makes: the endpoint's own list, and the key to set.
        assert "claude-haiku-4-5" in model["detail"] and "set llm.model" in model["detail"]

        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
        monkeypatch.setenv("AGENTD_LLM__MODEL", "claude-haiku-4-5")
        monkeypatch.setenv("AGENTD_ACCESS__ALLOWED_USER_IDS", "[42]")
        code, output = invoke("doctor", "--json", "--config", str(cfg))
        assert code == 0, output
        assert {c["check"] for c in json.loads(output)} >= {"model", "allowlist", "telegram"}

    bad = tmp_path / "bad.toml"
    bad.write_text("[agent]\ntimezone = 'Mars/Olympus'\n")
    code, output = invoke("doctor", "--config", str(bad))
    assert code == 78 and "agent.timezone" in output and "fix the key named" not in output
    bad.write_text("[agent]\ntimezone = 'Europe'\n")  # a folder of the zone database, no zone
    code, output = invoke("doctor", "--config", str(bad))
    assert code == 78 and "agent.timezone" in output and "fix the key named" not in output


def test_browser_login_without_its_sandbox_says_what_to_install(tmp_path: Path) -> None:
    """Without bubblewrap (or with no Chromium where the config says) the sign-in says which is
    missing and how to get it, not a traceback."""
    path = tmp_path / "agentd.toml"
    path.write_text(
        f'[storage]\npath = "{tmp_path / "agentd.db"}"\n[access]\nowner_id = 42\n'
        f'[browser]\nsandbox = "bwrap"\nexecutable = "{tmp_path / "no-chromium"}"\n'
    )
    result = runner.invoke(app, ["browser", "login", "shop", "https://shop.test/", "-c", str(path)])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "the browser cannot start" in result.output
    assert "apt-get install" in result.output


def test_watch_add_refuses_a_mail_account_the_config_lacks(config: Path, database: object) -> None:
    args = ["watch", "add", "--label", "inbox", "--if", "anything", "--every", "1h"]
    result = runner.invoke(
        app, [*args, "--mail", "nope/INBOX", "--config", str(config)], env={"COLUMNS": "80"}
    )
    flat = " ".join(result.output.split())
    assert result.exit_code == 1 and "not added: no mail account is configured" in flat
    assert "agentd init --add-mail" in flat and "[[mail]]" in flat
    assert invoke("watch", "ls", "--json", "--config", str(config)) == (0, "[]\n")


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_an_unknown_approval_id_says_how_to_list_them(
    verb: str, config: Path, database: object
) -> None:
    code, output = invoke(verb, "apnosuch", "--config", str(config))
    flat = " ".join(output.split())
    assert code == 1 and "no approval apnosuch" in flat and "agentd pending" in flat


@pytest.mark.parametrize("command", [["automations", "ls"], ["workflows", "automations"]])
def test_no_automations_says_where_they_are_defined(
    command: list[str], tmp_path: Path, config: Path, database: object
) -> None:
    result = runner.invoke(app, [*command, "--config", str(config)], env={"COLUMNS": "80"})
    flat = " ".join(result.output.split())
    assert result.exit_code == 0 and "No automations are configured" in flat, result.output
    assert '[automations] folder = "…"' in flat and "docs/workflows.md" in flat
    assert max(len(line) for line in result.output.splitlines()) <= 80
    folder = tmp_path / "automations"
    folder.mkdir()
    config.write_text(config.read_text() + f'[automations]\nfolder = "{folder}"\n')
    result = runner.invoke(app, [*command, "--config", str(config)], env={"COLUMNS": "80"})
    flat = " ".join(result.output.split())
    assert "no @workflow is declared in the folder" in flat, result.output


def test_usage_of_a_schedule_that_does_not_exist_says_so(config: Path, database: object) -> None:
    code, output = invoke("usage", "--schedule", "nosuch", "--config", str(config))
    flat = " ".join(output.split())
    assert code == 1 and "no schedule or watch has the id nosuch" in flat, output
    assert "agentd schedule ls" in flat
    added = runner.invoke(
        app,
        ["schedule", "add", "--message", "stretch", "--every", "1d", "--json"],
        env={"AGENTD_CONFIG": str(config)},
    )
    sid = json.loads(added.output)["id"]
    code, output = invoke("usage", "--schedule", sid, "--config", str(config))
    assert code == 0 and "No model calls in the last 30 days." in output, output
    # The start of ids, as the help says: every briefing, daily and once.
    assert invoke("briefing", "enable", "--at", "07:30", "--config", str(config))[0] == 0
    assert invoke("usage", "--schedule", "briefing", "--config", str(config))[0] == 0


def test_a_start_input_that_cannot_be_read_says_why(
    tmp_path: Path, config: Path, database: object
) -> None:
    """`--input @file` of another encoding, or JSON nested past the decoder's depth: a line
    saying what is wrong, exit 1, never a traceback."""
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"name": "Jos\xe9"}')
    code, output = invoke(
        "workflows", "start", "greet", "--input", f"@{latin}", "--config", str(config)
    )
    assert code == 1 and "is not UTF-8 text" in output and "Traceback" not in output
    deep = "[" * 5000 + "]" * 5000
    code, output = invoke("workflows", "start", "greet", "--input", deep, "--config", str(config))
    assert code == 1 and "nests too deeply" in output
