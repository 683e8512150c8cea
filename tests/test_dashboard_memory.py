"""The dashboard's memory page: pin, forget, history, and (with the daemon's embedder) edit and
restore, through the same manage.py functions as the CLI, audited as made on the dashboard."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agentd.dashboard.access import FileAccess
from agentd.dashboard.config import DashboardConfig
from agentd.dashboard.server import Site, make_app
from agentd.db.connect import open_sync
from agentd.db.runner import ConnRunner
from agentd.memory import HashingEmbedder
from agentd.memory.manage import add
from agentd.memory.store import get_memory
from tests.test_dashboard_security import Dash, seeded

Open = Callable[[bool], Any]


@pytest.fixture
async def memory_dash(tmp_path: Path) -> AsyncIterator[Open]:
    """Open the dashboard with or without an embedder, over one seeded database."""
    path = tmp_path / "agentd.db"
    approval = seeded(path, "x")
    conn = open_sync(path)
    added, _ = await add(ConnRunner(conn), HashingEmbedder(), 42, "Lives in Paris")
    conn.close()
    clients: list[TestClient] = []

    async def open_dash(embedder: bool) -> tuple[Dash, int]:
        site = Site(
            access=FileAccess(path),
            config=DashboardConfig(),
            embedder=HashingEmbedder() if embedder else None,
        )
        client = TestClient(TestServer(make_app(site)))
        await client.start_server()
        clients.append(client)
        return Dash(path, client, approval), added.id

    yield open_dash
    for client in clients:
        await client.close()


async def _post(dash: Dash, path: str, csrf: str, **data: str) -> str:
    response = await dash.client.post(
        path, data={"csrf": csrf, **data}, headers={"Origin": dash.origin()}
    )
    assert response.status == 200, path
    return await response.text()


def _read(dash: Dash, fn: Callable[[Any], Any]) -> Any:
    conn = open_sync(dash.path)
    try:
        return fn(conn)
    finally:
        conn.close()


async def test_edit_history_restore_and_pin_are_the_clis_operations(memory_dash: Open) -> None:
    dash, mid = await memory_dash(True)
    csrf = await dash.login()
    listed = await (await dash.client.get("/memory")).text()
    assert f'href="/memory/{mid}"' in listed and "Lives in Paris" in listed
    page = await (await dash.client.get(f"/memory/{mid}")).text()
    assert 'name="text"' in page and "Lives in Paris" in page

    said = await _post(dash, f"/memory/{mid}/edit", csrf, text="Lives in Lyon")
    assert "now reads: Lives in Lyon" in said
    memory = _read(dash, lambda c: get_memory(c, mid))
    assert memory.content == "Lives in Lyon" and memory.origin == "user"
    vectors = _read(dash, lambda c: c.execute("SELECT COUNT(*) FROM memory_vectors").fetchone())
    assert vectors[0] >= 1  # re-embedded, not left without a vector
    history = await (await dash.client.get(f"/memory/{mid}")).text()
    assert "Lives in Paris" in history and "Lives in Lyon" in history and "Restore" in history

    assert "restored to version 1" in await _post(dash, f"/memory/{mid}/restore", csrf, version="1")
    assert _read(dash, lambda c: get_memory(c, mid)).content == "Lives in Paris"
    assert "Pinned memory" in await _post(dash, f"/memory/{mid}/pin", csrf, on="1")
    assert _read(dash, lambda c: get_memory(c, mid)).pinned
    assert "Forgot memory" in await _post(dash, f"/memory/{mid}/forget", csrf)
    forgotten = await (await dash.client.get(f"/memory/{mid}")).text()
    assert "Forgotten" in forgotten and "Restore" in forgotten  # kept, and can come back

    audited = _read(
        dash,
        lambda c: c.execute(
            "SELECT kind, detail FROM audit WHERE kind LIKE 'memory_%' ORDER BY id"
        ).fetchall(),
    )
    assert [(k, json.loads(d)["action"], json.loads(d)["by"]) for k, d in audited] == [
        ("memory_changed", "edit", "dashboard"),
        ("memory_changed", "restore", "dashboard"),
        ("memory_changed", "pin", "dashboard"),
        ("memory_forgotten", "forget", "dashboard"),
    ]
    assert (await dash.client.get("/memory/999999")).status == 404


async def test_without_an_embedder_edit_is_offered_only_from_the_daemon(
    memory_dash: Open,
) -> None:
    dash, mid = await memory_dash(False)
    csrf = await dash.login()
    page = await (await dash.client.get(f"/memory/{mid}")).text()
    assert 'name="text"' not in page and "agentd memory edit" in page
    said = await _post(dash, f"/memory/{mid}/edit", csrf, text="Lives in Rome")
    assert "cannot do on its own" in said
    assert _read(dash, lambda c: get_memory(c, mid)).content == "Lives in Paris"
    assert "Unpinned memory" in await _post(dash, f"/memory/{mid}/pin", csrf, on="0")


async def test_an_edit_too_long_is_refused_not_cut_short(memory_dash: Open) -> None:
    """Cut at the form's bound, the memory would silently say less than the owner wrote."""
    dash, mid = await memory_dash(True)
    csrf = await dash.login()
    said = await _post(dash, f"/memory/{mid}/edit", csrf, text="Lives in Lyon. " + "x" * 10_000)
    assert "at most 4000 characters" in said and "nothing was changed" in said
    assert _read(dash, lambda c: get_memory(c, mid)).content == "Lives in Paris"
    odd = "\u200fLives\u200b in \u202eLyon"  # RTL, zero-width and override marks are text too
    assert "now reads:" in await _post(dash, f"/memory/{mid}/edit", csrf, text=odd)
    assert _read(dash, lambda c: get_memory(c, mid)).content == odd
