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
# What of a profile the redactor learns when a turn uses it: values that look like a token
# (a session id, a JWT), at most this many, longest first. A word ("accepted", "dismissed")
# would be blanked out of every page the model reads, and a consent or a theme is no secret.
MAX_SECRETS = 32
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=:%-]{8,4096}")
_LETTER, _DIGIT = re.compile(r"[A-Za-z]"), re.compile(r"[0-9]")
# Local storage keeps tokens inside JSON too (an SDK's {"access_token": ...}): so many of its
# strings are looked at.
_JSON_STRINGS = 200


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


def secret_values(state: dict[str, Any]) -> list[str]:
    """The values of a storage state that look like credentials: cookies', and local
    storage's (or the strings of a JSON one)."""
    found: list[str] = [str(c.get("value") or "") for c in state.get("cookies") or []]
    for origin in state.get("origins") or []:
        for item in origin.get("localStorage") or []:
            found += _stored_strings(str(item.get("value") or ""))
    tokens = [v for v in dict.fromkeys(found) if _token_like(v)]
    return sorted(tokens, key=len, reverse=True)[:MAX_SECRETS]


def _token_like(value: str) -> bool:
    return bool(_TOKEN.fullmatch(value) and _LETTER.search(value) and _DIGIT.search(value))


def _stored_strings(value: str) -> list[str]:
    if not value.startswith(("{", "[")):
        return [value]
    try:
        parsed = json.loads(value)
    except ValueError:
        return [value]
    strings: list[str] = []
    todo: list[Any] = [parsed]
    while todo and len(strings) < _JSON_STRINGS:
        item = todo.pop()
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return strings


def site_matches(site: str, host: str) -> bool:
    """A profile for example.org serves example.org and its subdomains, nothing else."""
    site, host = site.lower().rstrip("."), host.lower().rstrip(".")
    return bool(site) and (host == site or host.endswith("." + site))
