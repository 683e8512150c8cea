"""Named browser profiles the owner keeps for a site: its cookies and local storage, as
Playwright's storage state, in a file only agentd's user can read (never the workspace, the
journal, a log or the prompt). A task without a profile gets a fresh one, deleted with it.

A profile is made by the owner (in the dashboard's "Sign in to a site", remote.py, or with
`agentd browser login NAME URL` in a terminal: the owner types the password, never the model),
used by a turn only on its own site, and removed with `agentd browser profiles rm NAME` or
the dashboard.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


class ProfileError(Exception):
    """A profile is missing, misnamed or unreadable; the message says what to do."""


class ProfileInfo(BaseModel):
    name: str
    site: str
    cookies: int
    saved_at: float


def profiles_dir(data_dir: Path) -> Path:
    return data_dir / "browser" / "profiles"


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ProfileError(
            f"{name[:40]!r} is not a profile name: lower-case letters, digits, - and _ (at most "
            "32), e.g. shop"
        )
    return name


def _path(data_dir: Path, name: str) -> Path:
    return profiles_dir(data_dir) / f"{check_name(name)}.json"


def save(data_dir: Path, name: str, site: str, state: dict[str, Any], now: float) -> Path:
    """Write the profile atomically, readable by agentd's user alone."""
    path = _path(data_dir, name)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"site": site, "saved_at": now, "state": state}, out)
    os.replace(tmp, path)
    return path


def saved_at(data_dir: Path, name: str) -> float | None:
    """When the profile was last saved, or None if there is none (removed, never made)."""
    try:
        return float(json.loads(_path(data_dir, name).read_text()).get("saved_at") or 0.0)
    except (OSError, ValueError, AttributeError):
        return None


def load(data_dir: Path, name: str) -> tuple[str, dict[str, Any]]:
    """(site, storage state) of a saved profile."""
    path = _path(data_dir, name)
    try:
        stored = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProfileError(
            f"there is no browser profile {name!r}; the owner makes one in the dashboard (Browser, "
            "Sign in to a site) or with `agentd browser login NAME URL`"
        ) from None
    except (OSError, ValueError) as exc:
        raise ProfileError(f"the browser profile {name!r} cannot be read ({exc})") from None
    return str(stored.get("site", "")), dict(stored.get("state") or {})


def listing(data_dir: Path) -> list[ProfileInfo]:
    found = []
    folder = profiles_dir(data_dir)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found.append(
            ProfileInfo(
                name=path.stem,
                site=str(stored.get("site", "")),
                cookies=len((stored.get("state") or {}).get("cookies") or []),
                saved_at=float(stored.get("saved_at") or 0.0),
            )
        )
    return found


def remove(data_dir: Path, name: str) -> bool:
    try:
        _path(data_dir, name).unlink()
    except FileNotFoundError:
        return False
    return True


def site_matches(site: str, host: str) -> bool:
    """A profile for example.org serves example.org and its subdomains, nothing else."""
    site, host = site.lower().rstrip("."), host.lower().rstrip(".")
    return bool(site) and (host == site or host.endswith("." + site))
