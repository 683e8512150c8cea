"""Run a corpus script once per import mode, each in its own interpreter, all at once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
Runs = dict[str, tuple[dict[str, Any], list[str]]]


def run_modes(module: str, modes: Sequence[str], timeout: float = 120) -> Runs:
    """`python -m module MODE` per mode → (its RESULT json, its "LOG " lines), by mode.

    A library imports once per process, so each mode needs a fresh interpreter.
    """
    procs = {
        mode: subprocess.Popen(
            [sys.executable, "-m", module, mode],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode in modes
    }
    out: Runs = {}
    for mode, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"{mode}:\n{stderr}"
        lines = stdout.splitlines()
        result = next(json.loads(x[len("RESULT ") :]) for x in lines if x.startswith("RESULT "))
        out[mode] = (result, [x for x in lines if x.startswith("LOG ")])
    return out
