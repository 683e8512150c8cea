"""A channel brings its own configuration section and its own tables through its contract
(`chat.channel.Channel.section`, `.migrations`): the loader validates `[telegram]` and
`[matrix]` through the channel list as strictly as the core's sections, the keys that became
channel-neutral still load with a warning, and a database made when Matrix's tables were in
the core list upgrades without running them twice."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentd.channels import channels, config_class, load_config, migrations, sections
from agentd.config import Config, ConfigError, Section, config_model
from agentd.db import open_sync
from agentd.db.migrations import MIGRATIONS, Migration, apply_migrations, pending
from agentd.matrix.config import settings as matrix_settings
from agentd.matrix.schema import DRAFTS, TABLES
from agentd.telegram.config import settings as telegram_settings
from tests.channel_files import ROOT, Touched, every_channel, tables

MATRIX = '[matrix]\nhomeserver = "https://m.example.org"\nuser_id = "@agentd:example.org"\n'


def _load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Config:
    path = tmp_path / "agentd.toml"
    path.write_text(text)
    return load_config(path, env=env or {})


def _refusal(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text, env)
    return str(caught.value)


# -- the sections ---------------------------------------------------------------------------


def test_each_listed_channel_declares_its_section_named_after_it() -> None:
    assert [s.name for s in sections()] == [c.name for c in channels()]
    assert set(config_class().model_fields) >= {"telegram", "matrix"}
    assert not {"telegram", "matrix"} & set(Config.model_fields)  # the core names neither


def test_a_channel_section_is_validated_as_strictly_as_the_core_s(tmp_path: Path) -> None:
    config = _load(tmp_path, MATRIX + "sync_timeout = 5\n[telegram]\npoll_timeout = 7\n")
    cfg = matrix_settings(config)
    assert cfg is not None and cfg.user_id == "@agentd:example.org" and cfg.sync_timeout == 5
    assert telegram_settings(config).poll_timeout == 7
    said = _refusal(tmp_path, MATRIX + "homesrever = 'x'\n")
    assert "matrix.homesrever: unknown key; did you mean homeserver?" in said
    said = _refusal(tmp_path, "[telegram]\npoll_timeout = 'soon'\n")
    assert "telegram.poll_timeout" in said and "'soon'" in said
    said = _refusal(tmp_path, "[telegram]\ntoken = '1:x'\n")
    assert "telegram.token: secrets are not read from the config file" in said
    said = _refusal(tmp_path, '[matrix]\nhomeserver = "https://m.example.org"\n')
    assert "matrix.user_id" in said  # a required key of an optional section
    said = _refusal(tmp_path, "[telegrm]\npoll_timeout = 5\n")
    assert "telegrm: unknown key; did you mean telegram?" in said


def test_an_absent_section_is_its_defaults_or_off(tmp_path: Path) -> None:
    config = _load(tmp_path, "")
    assert matrix_settings(config) is None and telegram_settings(config).poll_timeout == 30
    # A Config built without the channel list (a unit test's) reads the same.
    assert matrix_settings(Config()) is None and telegram_settings(Config()).poll_timeout == 30


def test_environment_overrides_reach_a_channel_s_section(tmp_path: Path) -> None:
    config = _load(tmp_path, MATRIX, {"AGENTD_MATRIX__SYNC_TIMEOUT": "9"})
    cfg = matrix_settings(config)
    assert cfg is not None and cfg.sync_timeout == 9
    config = _load(tmp_path, "", {"AGENTD_TELEGRAM__API_BASE": "http://127.0.0.1:9"})
    assert telegram_settings(config).api_base == "http://127.0.0.1:9"
    said = _refusal(tmp_path, MATRIX, {"AGENTD_MATRIX_SYNC_TIMEOUT": "9"})
    assert "AGENTD_MATRIX__SYNC_TIMEOUT" in said  # one underscore: said, not ignored
    said = _refusal(tmp_path, MATRIX, {"AGENTD_MATRIX__SYNC_TIMEOUT": "500"})
    assert "environment variable AGENTD_MATRIX__SYNC_TIMEOUT: matrix.sync_timeout" in said


def test_the_core_loader_alone_refuses_a_section_no_channel_declared(tmp_path: Path) -> None:
    from agentd.config import load_config as core_load

    path = tmp_path / "agentd.toml"
    path.write_text(MATRIX)
    with pytest.raises(ConfigError, match="matrix: unknown key"):
        core_load(path, env={})
    assert matrix_settings(core_load(path, env={}, sections=sections())) is not None


def test_a_section_declared_twice_is_refused_at_once() -> None:
    class Other(BaseModel):
        x: int = 1

    with pytest.raises(ValueError, match=r"\[access\] is declared twice"):
        config_model((Section("access", Other),))


def test_group_and_streaming_keys_moved_out_of_the_channels_load_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`allow_groups` is an access rule and streaming a chat's, on every channel."""
    old = (
        "[telegram]\nallow_groups = true\nstreaming = false\nstream_interval = 2.0\n"
        "progress_delay = 0\n" + MATRIX + "allow_groups = true\n"
    )
    with caplog.at_level(logging.WARNING, logger="agentd"):
        config = _load(tmp_path, old)
    assert config.access.allow_groups is True
    assert (config.chat.streaming, config.chat.stream_interval, config.chat.progress_delay) == (
        False,
        2.0,
        0.0,
    )
    said = [r.getMessage() for r in caplog.records if "now spelled" in r.getMessage()]
    moves = [
        ("telegram.allow_groups", "access.allow_groups"),
        ("telegram.streaming", "chat.streaming"),
        ("telegram.stream_interval", "chat.stream_interval"),
        ("telegram.progress_delay", "chat.progress_delay"),
        ("matrix.allow_groups", "access.allow_groups"),
    ]
    assert said == [f"configuration key [{a}] is now spelled [{b}]; rename it" for a, b in moves]
    caplog.clear()
    new = "[access]\nallow_groups = true\n[chat]\nstreaming = false\n"
    with caplog.at_level(logging.WARNING, logger="agentd"):
        config = _load(tmp_path, new)
    assert config.access.allow_groups and not config.chat.streaming
    assert not [r for r in caplog.records if "now spelled" in r.getMessage()]
    # An old key by environment variable moves too, and its errors name the variable.
    config = _load(tmp_path, "", {"AGENTD_TELEGRAM__ALLOW_GROUPS": "true"})
    assert config.access.allow_groups is True
    said = _refusal(tmp_path, "", {"AGENTD_TELEGRAM__ALLOW_GROUPS": '"maybe"'})
    assert "AGENTD_TELEGRAM__ALLOW_GROUPS" in said and "access.allow_groups" in said


def test_groups_are_one_rule_on_both_channels(tmp_path: Path) -> None:
    from agentd.matrix.channel import identity as matrix_identity
    from agentd.telegram.channel import identity as telegram_identity

    config = _load(tmp_path, MATRIX + "[access]\nallowed_user_ids = [42]\nallow_groups = true\n")
    assert telegram_identity(config, 1, "bot").allow_groups
    assert matrix_identity(config).allow_groups
    config = _load(tmp_path, MATRIX + "[access]\nallowed_user_ids = [42]\n")
    assert not telegram_identity(config, 1, "bot").allow_groups
    assert not matrix_identity(config).allow_groups


# -- the tables -----------------------------------------------------------------------------

# The list as main applied it before Matrix owned its tables: m040 and m042 were core steps.
MAIN_ORDER = [  # 39 steps, m040-m042 and m036 last
    *[n for n, _ in MIGRATIONS if n not in ("m041_chat_addresses", "m036_users")],
    "m040_matrix",
    "m041_chat_addresses",
    "m042_matrix_drafts",
    "m036_users",
]


def _main_migrations() -> list[tuple[str, str]]:
    sql = dict(MIGRATIONS) | {"m040_matrix": TABLES, "m042_matrix_drafts": DRAFTS}
    return [(name, sql[name]) for name in MAIN_ORDER]


def _recorded(conn: Any) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}


def test_matrix_tables_are_the_channel_s_own_set_applied_after_the_core(tmp_path: Path) -> None:
    names = [m.name if isinstance(m, Migration) else m[0] for m in migrations()]
    core = [name for name, _ in MIGRATIONS]
    assert names[: len(core)] == core
    # Then each listed channel's set, in the list's order (read from it: a new channel's set
    # follows without an edit here).
    assert names[len(core) :] == [m.name for c in channels() for m in c.migrations]
    assert [n for n in names if n.startswith("matrix/")] == [
        "matrix/m001_tables",
        "matrix/m002_drafts",
        "matrix/m003_sent",
        "matrix/m004_ages",
        "matrix/m005_early",
        "matrix/m006_answer_drafts",
    ]
    assert not {"m040_matrix", "m042_matrix_drafts"} & set(core)
    conn = open_sync(tmp_path / "fresh.db")
    ran = apply_migrations(conn, migrations())
    assert ran == names and apply_migrations(conn, migrations()) == []
    assert pending(conn, migrations()) == []
    conn.execute("SELECT n, kind, mxid FROM matrix_ids").fetchall()
    conn.execute("SELECT chat_id, event_id FROM matrix_drafts").fetchall()
    # The core list alone (the dashboard's health check) has nothing pending either.
    assert pending(conn) == []


def test_a_database_made_by_main_s_migrations_upgrades_without_running_them_twice(
    tmp_path: Path,
) -> None:
    conn = open_sync(tmp_path / "main.db")
    apply_migrations(conn, _main_migrations())
    assert {"m040_matrix", "m042_matrix_drafts"} <= _recorded(conn)
    with conn:
        conn.execute("INSERT INTO matrix_ids (n, kind, mxid) VALUES (1, 'room', '!a:x')")
        conn.execute("INSERT INTO matrix_drafts (chat_id, event_id) VALUES (9, '$e')")
    # Known as done before anything is renamed; only a channel set never in the core list
    # (a channel added since, read from the list) is new to this database.
    new = [m.name for c in channels() for m in c.migrations if not m.formerly]
    assert [n for n in new if n.startswith("matrix/")] == [
        "matrix/m003_sent",
        "matrix/m004_ages",
        "matrix/m005_early",
        "matrix/m006_answer_drafts",
    ]
    assert pending(conn, migrations()) == new
    assert apply_migrations(conn, migrations()) == new  # Matrix's do not run: CREATE would fail
    recorded = _recorded(conn)
    assert {"matrix/m001_tables", "matrix/m002_drafts"} <= recorded
    assert not {"m040_matrix", "m042_matrix_drafts"} & recorded
    assert [r[0] for r in conn.execute("SELECT mxid FROM matrix_ids")] == ["!a:x"]
    # The draft open at the upgrade is kept, as one the chat's next answer replaces (id 0).
    kept = conn.execute("SELECT chat_id, draft_id, event_id FROM matrix_drafts").fetchall()
    assert [tuple(r) for r in kept] == [(9, 0, "$e")]
    assert apply_migrations(conn, migrations()) == []


def test_a_database_from_before_matrix_gets_its_tables_from_the_set(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "old.db")
    before = MAIN_ORDER.index("m040_matrix")
    apply_migrations(conn, _main_migrations()[:before])
    ran = apply_migrations(conn, migrations())
    sets = [m.name for c in channels() for m in c.migrations]
    assert ran == ["m041_chat_addresses", "m036_users", *sets]
    assert [n for n in sets if n.startswith("matrix/")] == [
        "matrix/m001_tables",
        "matrix/m002_drafts",
        "matrix/m003_sent",
        "matrix/m004_ages",
        "matrix/m005_early",
        "matrix/m006_answer_drafts",
    ]
    conn.execute("SELECT * FROM matrix_rooms").fetchall()


def test_events_agentd_sent_before_it_said_so_are_marked_by_what_intake_never_took(
    tmp_path: Path,
) -> None:
    conn = open_sync(tmp_path / "m002.db")
    later = (
        "matrix/m003_sent",
        "matrix/m004_ages",
        "matrix/m005_early",
        "matrix/m006_answer_drafts",
    )
    upto = [m for m in migrations() if not (isinstance(m, Migration) and m.name in later)]
    apply_migrations(conn, upto)
    with conn:
        conn.executemany(
            "INSERT INTO matrix_ids (n, kind, mxid, room_id) VALUES (?, ?, ?, '!r:x')",
            [(1, "room", "!r:x"), (2, "event", "$answer"), (3, "event", "$message")],
        )
        conn.execute(
            "INSERT INTO matrix_events (event_id, received_at, room_id, sender, kind, outcome) "
            "VALUES ('$message', 0, '!r:x', '@owner:x', 'm.room.message', 'turn')"
        )
    assert apply_migrations(conn, migrations()) == [
        "matrix/m003_sent",
        "matrix/m004_ages",
        "matrix/m005_early",
        "matrix/m006_answer_drafts",
    ]
    sent = dict(conn.execute("SELECT mxid, sent FROM matrix_ids").fetchall())
    assert sent == {"!r:x": 0, "$answer": 1, "$message": 0}
    # Rows from before ids had an age age from the upgrade (matrix/kept.py), not from 1970.
    [(oldest,)] = conn.execute("SELECT MIN(made_at) FROM matrix_ids").fetchall()
    assert oldest > time.time() - 3600


# -- docs and the count, from the channel list ------------------------------------------------


@pytest.mark.parametrize("touched", every_channel(), ids=lambda t: t.name)
def test_every_listed_channel_has_its_page_its_rows_and_its_keys(touched: Touched) -> None:
    """Nothing about a channel is kept by hand in a second place without a check: its page,
    its row in the architecture's tier table (test_layout checks the tier), its line in the
    configuration page's table, and every key of its section in config.example.toml
    (test_docs checks each key)."""
    channel = next(c for c in channels() if c.name == touched.name)
    assert touched.docs == [
        f"docs/{touched.name}.md",
        "docs/architecture.md",
        "config.example.toml",
        "docs/configuration.md",
        "README.md",
    ]
    page = (ROOT / "docs" / f"{touched.name}.md").read_text(encoding="utf-8")
    assert f"[{channel.section.name}]" in page
    missing = [k for k in channel.section.model.model_fields if f"`{k}`" not in page]
    assert missing == [], f"say what these keys of [{channel.section.name}] do on its page"
    table = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert f"| `[{channel.section.name}]` | [{touched.name}.md]({touched.name}.md) |" in table


# What still names Telegram outside its package, and why: `agentd init` sets up the first
# channel (its token, its default Bot API server).
FIRST_CHANNEL_SETUP = {"telegram": ["agentd/cli/init.py"]}


@pytest.mark.parametrize("touched", every_channel(), ids=lambda t: t.name)
def test_a_channel_is_its_package_plus_one_list_entry(touched: Touched) -> None:
    """The core names no channel: outside its package, only the list imports it, reads its
    section or names its tables (benchmarks/matrix_channel.py reports the same count)."""
    expected = ["agentd/channels/__init__.py", *FIRST_CHANNEL_SETUP.get(touched.name, [])]
    assert sorted(touched.code) == sorted(expected)


def test_the_count_sees_a_leak(tmp_path: Path) -> None:
    """The check is not blind: a core module reading `config.matrix` is found."""
    import ast

    from tests.channel_files import _names

    matrix = next(c for c in channels() if c.name == "matrix")
    for leak in (
        "x = config.matrix.homeserver",
        "from agentd.matrix.ids import BLOCK",
        "conn.execute('SELECT * FROM matrix_rooms')",
    ):
        assert _names(ast.parse(leak), "matrix", "matrix", tables(matrix)), leak
    assert not _names(ast.parse("x = config.chat.streaming"), "matrix", "matrix", tables(matrix))
