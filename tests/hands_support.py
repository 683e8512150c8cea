"""Helpers for the hands tests: a folder the sandbox user can reach, and process lookups."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def reachable_dir() -> Path:
    """A folder the sandbox user (nobody, when tests run as root) can reach and write: pytest's
    own temporary folders are 0700 and bwrap resolves binds as that user."""
    base = Path(tempfile.mkdtemp(prefix="hands-", dir="/tmp"))
    base.chmod(0o711)
    ws = base / "ws"
    ws.mkdir()
    if os.geteuid() == 0:
        os.chown(ws, 65534, 65534)
    return ws


def alive(marker: str) -> bool:
    """Whether any process has `marker` in its command line (NUL-separated words)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return True
        except OSError:
            continue
    return False
