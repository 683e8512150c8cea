"""The one secret reader: every secret agentd uses is read by `read_secret`.

A secret is named, never written in the config file. Its value is looked up, in order, in
the environment, then in `agentd.env` beside the config file (KEY=value lines, owner-only),
then in a systemd credential (`$CREDENTIALS_DIRECTORY/NAME`, or the name in lower case).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, SecretStr

SECRETS_FILE = "agentd.env"  # written by `agentd init` beside the config; EnvironmentFile format
# The secret the core itself reads at load, by the field of `Secrets` that holds it: the model
# key. A channel's own (the Telegram bot token, Matrix's access token) is named in its section
# and read by the channel.
CORE_SECRETS = {"anthropic_api_key": "ANTHROPIC_API_KEY"}


class SecretFileError(Exception):
    """agentd.env cannot be used (others may read it)."""


class Secrets(BaseModel):
    """The core secrets, read at load time (never from the config file)."""

    anthropic_api_key: SecretStr | None = None


def read_secrets_file(path: Path) -> dict[str, str]:
    """KEY=value lines of the secrets file (absent: empty); it must be owner-only."""
    if not path.is_file():
        return {}
    if path.stat().st_mode & 0o077:
        raise SecretFileError(f"{path} holds secrets but others may read it; run: chmod 600 {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except PermissionError:  # root's file, read by systemd; the CLI as another user needs none
        return {}
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip().strip("'\"")
    return values


@dataclass(frozen=True)
class SecretSource(Mapping[str, str]):
    """The environment and agentd.env together, looked up through `read_secret`.

    A Mapping, so code that takes an `env` (the embedder, MCP's `pass_env`, a hook's secret)
    gets the same answer by `env.get(NAME)` as by `read_secret(NAME, env)`. Iterating lists
    the environment and the file, never the credentials folder.
    """

    env: Mapping[str, str]
    stored: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> str:
        value = read_secret(name, self)
        if not value and name not in self.env and name not in self.stored:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter({**self.stored, **self.env})

    def __len__(self) -> int:
        return len({**self.stored, **self.env})


def read_secret(name: str, source: Mapping[str, str]) -> str:
    """The secret NAME: the environment, then agentd.env, then a systemd credential; "" if none.

    `source` is a `SecretSource`, or a plain environment (then agentd.env is not consulted).
    """
    if not name:
        return ""
    env, stored = (source.env, source.stored) if isinstance(source, SecretSource) else (source, {})
    value = str(env.get(name) or stored.get(name) or "").strip()
    cred_dir = env.get("CREDENTIALS_DIRECTORY")
    if not value and cred_dir:
        for candidate in (name, name.lower()):
            path = Path(cred_dir) / candidate
            if path.is_file():
                return path.read_text().strip()
    return value


def core_secrets(source: SecretSource) -> Secrets:
    """The model key, through the one reader."""
    values = {field: read_secret(name, source) for field, name in CORE_SECRETS.items()}
    return Secrets(**{k: SecretStr(v) if v else None for k, v in values.items()})
