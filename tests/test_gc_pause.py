"""Garbage collection stays off while any start-up import runs, and only then."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from agentd.runtime.gc_pause import freeze_startup, paused, pausing


@pytest.fixture(autouse=True)
def collector_on() -> None:
    gc.enable()


def test_nested_pauses_from_two_threads_resume_after_the_last() -> None:
    inside, release = threading.Event(), threading.Event()

    @pausing
    def slow_import() -> str:
        inside.set()
        release.wait(5)
        return "imported"

    results: list[str] = []
    worker = threading.Thread(target=lambda: results.append(slow_import()))
    worker.start()
    assert inside.wait(5)
    assert not gc.isenabled()
    with paused():  # the main thread's own import, overlapping the worker's
        assert not gc.isenabled()
    assert not gc.isenabled()  # the worker's pause is still on
    release.set()
    worker.join(5)
    assert results == ["imported"] and gc.isenabled()


def test_a_failing_import_still_resumes_collection() -> None:
    with pytest.raises(ImportError), paused():
        raise ImportError("broken install")
    assert gc.isenabled()


def test_collection_switched_off_before_stays_off() -> None:
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_freeze_startup_leaves_what_lives_now_out_of_collections() -> None:
    gc.unfreeze()
    survivor = [object()]
    try:
        freeze_startup()
        assert gc.get_freeze_count() > 0
        assert not any(o is survivor for o in gc.get_objects())  # no generation holds it
    finally:
        gc.unfreeze()  # the rest of the test process collects as usual


def test_what_a_pause_made_is_frozen_when_the_last_pause_ends() -> None:
    gc.unfreeze()
    try:
        with paused():
            made = [[i] for i in range(1000)]  # what an import leaves behind, alive
            assert gc.get_freeze_count() == 0
        assert gc.get_freeze_count() >= len(made)
    finally:
        gc.unfreeze()


def test_a_preloaded_module_is_imported_with_collection_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentd.llm.preload import Preload

    (tmp_path / "probe_gc_module.py").write_text("import gc\nENABLED = gc.isenabled()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = Preload("probe_gc_module").wait()
    assert module.ENABLED is False
    assert gc.isenabled()
