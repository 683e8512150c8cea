"""The lowest versions `.ci/run` tests (aiogram, pydantic, the anthropic and openai SDKs) are
pinned beside everything else pip installed for `.[test]`: each pin must be one those
packages accept, or the floor run tests a set pip calls broken (`pip check`), not the floor."""

from __future__ import annotations

import importlib.metadata as metadata
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pinned_floors() -> dict[str, Version]:
    """What the floors step of .ci/run pins: each name it lists, at its declared `>=`."""
    script = (ROOT / ".ci" / "run").read_text()
    names = re.findall(r'"([\w-]+)"', re.search(r"for name in \(([^)]*)\)", script)[1])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [Requirement(d) for d in project["dependencies"]]
    declared += [Requirement(d) for d in project["optional-dependencies"]["openai"]]
    floors = {}
    for name in names:
        req = next(r for r in declared if canonicalize_name(r.name) == canonicalize_name(name))
        [low] = [s.version for s in req.specifier if s.operator == ">="]
        floors[canonicalize_name(name)] = Version(low)
    return floors


def _installed_closure() -> list[metadata.Distribution]:
    """agentd with every extra, and what it pulls in, as installed here."""
    wanted: dict[str, set[str]] = {}
    found: list[metadata.Distribution] = []
    extras = list(metadata.distribution("agentd").metadata.get_all("Provides-Extra") or [])
    todo = [Requirement(f"agentd[{','.join(extras)}]")]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        asked = set(req.extras) - wanted.get(name, set())
        if name in wanted and not asked:
            continue
        if name not in wanted:
            found.append(dist)
        wanted[name] = wanted.get(name, set()) | set(req.extras)
        for line in dist.requires or []:
            sub = Requirement(line)
            envs = [{"extra": e} for e in wanted[name]] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append(sub)
    return found


def test_every_pinned_floor_is_accepted_by_what_is_installed_beside_it() -> None:
    floors = _pinned_floors()
    assert set(floors) >= {"aiogram", "pydantic", "anthropic"}
    refused = []
    for dist in _installed_closure():
        for line in dist.requires or []:
            req = Requirement(line)
            name = canonicalize_name(req.name)
            if name not in floors or (req.marker and not req.marker.evaluate({"extra": ""})):
                continue
            if floors[name] not in req.specifier:
                refused.append(
                    f"{dist.metadata['Name']} {dist.version} needs {name}{req.specifier}"
                )
    assert refused == [], "raise the floor in pyproject.toml to what these accept"
