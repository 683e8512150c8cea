"""The lazy Anthropic SDK import answers every kind of request exactly as the eager one does."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.corpus_runs import Runs, run_modes

ROOT = Path(__file__).resolve().parents[1]
MODES = ("lazy", "eager", "broken")


@pytest.fixture(scope="module")
def runs() -> Runs:
    return run_modes("tests.anthropic_corpus", MODES)


def test_lazy_import_answers_exactly_as_the_eager_import(runs) -> None:  # type: ignore[no-untyped-def]
    lazy, lazy_logs = runs["lazy"]
    eager, _ = runs["eager"]
    assert (lazy["mode"], lazy["again"], eager["mode"]) == ("lazy", "lazy", "eager")
    assert lazy_logs == []
    assert lazy["answers"].keys() == eager["answers"].keys()
    for case, answer in eager["answers"].items():
        assert lazy["answers"][case] == answer, case
    # The cases are not vacuous: answers, errors and streamed text all came through.
    assert eager["answers"]["tool_use streamed"]["result"]["stop_reason"] == "tool_use"
    assert eager["answers"]["text streamed"]["text"][-1] == "Sunny."
    assert eager["answers"]["overloaded"]["result"]["status"] == 529
    assert eager["answers"]["stream_error streamed"]["result"]["retryable"] is True


def test_lazy_import_exports_the_same_names_from_the_same_places(runs) -> None:  # type: ignore[no-untyped-def]
    lazy, eager = runs["lazy"][0]["namespace"], runs["eager"][0]["namespace"]
    assert len(eager["anthropic"]) > 100 and len(eager["anthropic.types"]) > 500
    assert lazy == eager


def test_lazy_import_loads_a_fraction_of_the_sdk(runs) -> None:  # type: ignore[no-untyped-def]
    lazy_at_load, lazy_after = runs["lazy"][0]["modules"]
    assert lazy_at_load <= lazy_after
    eager_at_load, eager_after = runs["eager"][0]["modules"]
    assert eager_at_load == eager_after > 2000
    assert lazy_after < eager_at_load / 2  # after a request of every kind, not just the import


def test_a_failed_lazy_set_up_falls_back_to_the_whole_sdk(runs) -> None:  # type: ignore[no-untyped-def]
    broken, logs = runs["broken"]
    eager = runs["eager"][0]
    assert broken["mode"] == "eager"
    assert any("lazy anthropic import failed" in line for line in logs)
    assert broken["answers"] == eager["answers"]
    assert broken["modules"][0] == eager["modules"][0]


def test_declared_ranges_take_every_release_up_to_the_next_major() -> None:
    """No start-up workaround may hold users off a library's next minor (security) release."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name in ("anthropic", "aiogram", "pydantic"):
        pin = next(d for d in deps if re.match(rf"{name}(\[[^\]]*\])?[><=]", d))
        caps = re.findall(r"<(\d+)(?:\.(\d+))?", pin)
        assert all(minor in ("", "0") for _major, minor in caps), pin
