"""What the skill folders hold: valid skills by name, and the invalid ones with the reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentd.config import Config
from agentd.skills.folder import Limits, SkillFolder, SkillFolderError, read_skill
from agentd.skills.format import SkillFormatError


@dataclass(frozen=True)
class Invalid:
    path: Path
    reason: str


@dataclass
class Catalog:
    skills: dict[str, SkillFolder] = field(default_factory=dict)
    invalid: list[Invalid] = field(default_factory=list)


def limits_of(config: Config) -> Limits:
    return Limits(max_files=config.skills.max_files, max_bytes=config.skills.max_bytes)


def check(path: Path, limits: Limits) -> SkillFolder | Invalid:
    """One folder as a skill, or why it is not one. Never raises for what is in the folder."""
    try:
        return read_skill(path, limits)
    except (SkillFolderError, SkillFormatError) as exc:
        return Invalid(path, str(exc))
    except OSError as exc:
        return Invalid(path, f"could not be read: {exc.strerror or type(exc).__name__}")
    except Exception as exc:  # a reader's bug must cost one skill, never the daemon
        return Invalid(path, f"could not be read: {type(exc).__name__}")


def scan(dirs: list[Path], limits: Limits) -> Catalog:
    """Every skill folder in `dirs` (folders of skill folders), in name order; blocking.

    Two folders with one skill name: the one whose folder bears the name wins (the spec wants
    them equal), else the first found; the other is reported.
    """
    catalog = Catalog()
    valid: list[SkillFolder] = []
    for root in dirs:
        try:
            entries = sorted(root.iterdir()) if root.is_dir() else []
        except OSError as exc:
            catalog.invalid.append(Invalid(root, f"the folder cannot be listed: {exc.strerror}"))
            continue
        for path in entries:
            if path.name.startswith(".") or not (path.is_dir() or path.is_symlink()):
                continue
            found = check(path, limits)
            if isinstance(found, Invalid):
                catalog.invalid.append(found)
            else:
                valid.append(found)
    for found in sorted(valid, key=lambda f: f.path.name != f.name):
        first = catalog.skills.get(found.name)
        if first is None:
            catalog.skills[found.name] = found
        else:
            why = f"a second skill named {found.name!r} (the one in {first.path} is used)"
            catalog.invalid.append(Invalid(found.path, why))
    catalog.skills = dict(sorted(catalog.skills.items()))
    return catalog


def scan_config(config: Config) -> Catalog:
    return scan(config.skill_dirs, limits_of(config))
