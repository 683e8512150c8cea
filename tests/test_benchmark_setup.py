"""The benchmarks' own set-up, against today's code: a script that builds its data through
agentd's functions stops running when they change, and its figures can no longer be made
again. These run each such set-up small, so the change that breaks one fails here."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from agentd.config import Config
from agentd.db import open_sync
from tests.daemon_process import OWNER


def _count(db: Path, table: str) -> int:
    conn = open_sync(db)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


def test_schedule_scale_stores_its_daily_schedules_and_its_burst(tmp_path: Path) -> None:
    from benchmarks.schedule_scale import add_schedules

    add_schedules(tmp_path / "agentd.db", 4, 2, time.time() + 3600)
    assert _count(tmp_path / "agentd.db", "schedules") == 4


def test_watch_cost_stores_its_page_watches(tmp_path: Path) -> None:
    from benchmarks.watch_cost import add_watches

    config = Config.model_validate({"access": {"allowed_user_ids": [OWNER]}})
    add_watches(tmp_path / "agentd.db", 2, "https://shop.example/item", config)
    assert _count(tmp_path / "agentd.db", "watches") == 2


def test_automations_configures_its_listener_where_todays_config_reads_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An old spelling the config only carries forward puts a warning in the figure's output,
    and the script stops running the day that spelling is dropped."""
    from benchmarks.automations import _config

    with caplog.at_level(logging.WARNING):
        config = _config("NORMAL")
    assert config.hooks.enabled and set(config.hooks.routes) == {"b"}
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
