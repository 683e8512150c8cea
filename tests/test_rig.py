"""The test rig itself: what a program a test starts runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_child_python_started_elsewhere_imports_this_checkouts_agentd(tmp_path: Path) -> None:
    """A test that starts `python -m agentd` in a folder of its own tests this checkout, not
    the one the venv has installed in editable mode (another worktree's)."""
    found = subprocess.run(
        [sys.executable, "-c", "import agentd; print(agentd.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert Path(found).resolve().is_relative_to(ROOT), found
