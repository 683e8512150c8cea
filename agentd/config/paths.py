"""The one path rule: a relative path in the configuration is relative to the config file's
folder (as `agentd.env` is), and is stored absolute, so every process (the daemon under
systemd, the CLI from any folder) reads the same path. A path set through the environment
(`AGENTD_<SECTION>__<KEY>`) keeps the caller's working directory."""

from __future__ import annotations

import os.path
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentd.config.schema import Config


def resolve(path: str | Path, base: Path) -> Path:
    """`path` (with `~` expanded) against `base` when relative: absolute, not normalised through
    symlinks (a skill's pin compares these strings)."""
    expanded = Path(path).expanduser()
    return Path(os.path.abspath(expanded if expanded.is_absolute() else base / expanded))


def resolve_paths(config: Config, folder: Path, from_env: dict[str, str]) -> None:
    """Every path key of the file, resolved against its folder, in place."""
    from agentd.config.schema import ConfigError

    storage = Path(config.storage.path).expanduser()
    if "storage.path" not in from_env and not storage.is_absolute():
        resolved = resolve(storage, folder)
        old = storage.absolute()  # relative to the working directory, as older versions read it
        if old != resolved and old.exists() and not resolved.exists():
            raise ConfigError(
                f"storage.path {config.storage.path!r} is relative to the config file's folder "
                f"({folder}), where there is no database yet, but {old} (relative to the "
                f"working directory, as older versions read it) exists: move it to {resolved}, "
                f"or set storage.path = {str(old)!r}"
            )
    here = Path.cwd()
    for section, key in _PATH_KEYS:
        owner = getattr(config, section) if "." not in section else _dotted(config, section)
        value = getattr(owner, key)
        if not value:
            continue
        base = here if f"{section}.{key}" in from_env else folder
        setattr(owner, key, str(resolve(value, base)))
    for i, account in enumerate(config.mail):
        if account.attachments_dir and f"mail.{i}.attachments_dir" not in from_env:
            account.attachments_dir = str(resolve(account.attachments_dir, folder))
        if account.ca_file:
            account.ca_file = str(resolve(account.ca_file, folder))
    config.skills.paths = [str(resolve(p, folder)) for p in config.skills.paths]


# (section, key) of every single path in the file; lists and accounts are handled above.
_PATH_KEYS = [
    ("storage", "path"),
    ("media", "outgoing_dir"),
    ("media", "local_model_dir"),
    ("memory", "local_model_dir"),
    ("tools.workspace", "path"),
    ("automations", "folder"),
]


def _dotted(config: Config, section: str) -> object:
    node: object = config
    for part in section.split("."):
        node = getattr(node, part)
    return node
