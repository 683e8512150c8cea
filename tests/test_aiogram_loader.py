"""The lazy aiogram import parses every kind of update and answer exactly as the eager one does."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from agentd.telegram import aiogram_loader
from tests.corpus_runs import Runs, run_modes

ROOT = Path(__file__).resolve().parents[1]
MODES = ("lazy", "eager", "broken", "changed")


@pytest.fixture(scope="module")
def runs() -> Runs:
    return run_modes("tests.aiogram_corpus", MODES, timeout=100)


def test_lazy_path_parses_the_corpus_exactly_as_the_eager_path(runs) -> None:  # type: ignore[no-untyped-def]
    lazy, lazy_logs = runs["lazy"]
    eager, _ = runs["eager"]
    assert (lazy["mode"], eager["mode"]) == ("lazy", "eager")
    assert lazy_logs == []
    for name, parsed in eager["updates"].items():
        assert lazy["updates"][name] == parsed, name
    for name, answer in eager["methods"].items():
        assert lazy["methods"][name] == answer, name
    assert lazy.keys() == eager.keys()


def test_lazy_import_builds_almost_nothing_up_front(runs) -> None:  # type: ignore[no-untyped-def]
    built, total = runs["lazy"][0]["built_at_load"]
    assert total > 250
    assert built < total / 2  # Update and what it contains, not all ~300 types
    assert runs["eager"][0]["built_at_load"] == [total, total]


def test_corpus_covers_every_kind_the_daemon_handles(runs) -> None:  # type: ignore[no-untyped-def]
    updates = runs["lazy"][0]["updates"]
    parsed = [u for u in updates.values() if isinstance(u, dict)]
    assert {u["event_type"] for u in parsed} == {"message", "edited_message", "callback_query"}
    kinds = {u["content_type"] for u in parsed}
    assert {
        "text",
        "photo",
        "voice",
        "document",
        "sticker",
        "new_chat_members",
        "left_chat_member",
        "pinned_message",
        "migrate_to_chat_id",
    } <= kinds
    mentions = [
        u
        for u in parsed
        if u["shape"].get("message", {}).get("chat", {}).get("type") == "supergroup"
        and "@agentd_bot" in str(u["dump"])
    ]
    assert mentions
    assert updates["message_without_chat"][0] == "ValidationError"
    methods = runs["lazy"][0]["methods"]
    assert methods["getUpdates"]["result"][0]["__class__"] == "Update"
    assert methods["sendMessage"]["result"]["__class__"] == "Message"
    assert methods["editMessageText_inline"]["result"] is True
    assert methods["error_retry_after"]["error"][0] == "TelegramRetryAfter"
    assert methods["error_retry_after"]["error"][2] == 7


@pytest.mark.parametrize(
    ("mode", "needle"),
    [("broken", "lazy aiogram set-up failed"), ("changed", "did not hand its namespace")],
)
def test_fallback_is_the_eager_import_with_one_log_line(runs, mode: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    result, logs = runs[mode]
    eager, _ = runs["eager"]
    assert result["mode"] == "eager"
    assert len(logs) == 1 and needle in logs[0], logs
    assert result["updates"] == eager["updates"]
    assert result["methods"] == eager["methods"]


def test_other_models_rebuild_as_usual_while_aiogram_imports() -> None:
    """The import-time patch passes other models through, resolving names from their caller."""
    from pydantic import BaseModel

    original = BaseModel.__dict__["model_rebuild"]

    class Later(BaseModel):
        inner: Inner

    class Inner(BaseModel):
        x: int

    recorded: dict[str, Any] = {}
    with aiogram_loader._rebuild_loop_skipped(recorded):
        assert Later.model_rebuild() is True
    assert Later.model_validate({"inner": {"x": 1}}).inner.x == 1
    assert recorded == {}
    assert BaseModel.__dict__["model_rebuild"] is original


def test_declared_ranges_take_every_release_up_to_the_next_major() -> None:
    """No start-up workaround may hold users off a library's next minor (security) release."""
    import re

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name in ("aiogram", "pydantic", "aiohttp"):
        pin = next(d for d in deps if re.match(rf"{name}(\[[^\]]*\])?[><=]", d))
        caps = re.findall(r"<(\d+)(?:\.(\d+))?", pin)
        assert all(minor in ("", "0") for _major, minor in caps), pin
