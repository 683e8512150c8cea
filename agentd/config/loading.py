"""Loading: find the file, parse the TOML, apply `AGENTD_<SECTION>__<KEY>` overrides,
validate, resolve paths against the file's folder and read the core's secret (the model key)."""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from agentd.config.paths import resolve_paths
from agentd.config.schema import Config, ConfigError
from agentd.config.secrets import (
    SECRETS_FILE,
    SecretFileError,
    SecretSource,
    core_secrets,
    read_secrets_file,
)
from agentd.config.sections import Section, config_model

ENV_PREFIX = "AGENTD_"


def find_config_file(explicit: str | Path | None, env: dict[str, str]) -> Path | None:
    """The config path by precedence: --config, $AGENTD_CONFIG, ./agentd.toml, XDG, /etc."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist; pass an existing --config PATH")
        return path
    if env.get("AGENTD_CONFIG"):
        path = Path(env["AGENTD_CONFIG"]).expanduser()
        if not path.is_file():
            raise ConfigError(f"AGENTD_CONFIG points to {path}, which does not exist")
        return path
    xdg = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    for candidate in (Path("agentd.toml"), xdg / "agentd" / "config.toml"):
        if candidate.is_file():
            return candidate
    etc = Path("/etc/agentd/config.toml")
    return etc if etc.is_file() else None


def _parse_env_value(raw: str) -> Any:
    # JSON first so lists and numbers work ('[42]', '5'); anything else is a plain string.
    try:
        return json.loads(raw)
    except ValueError:
        return raw


ENV_SYNTAX = (
    'values are JSON (5, true, "text", [42, 43]) or plain text, e.g. '
    "AGENTD_ACCESS__ALLOWED_USER_IDS='[42]'"
)


def _check_single_underscore(name: str, config: type[Config]) -> None:
    """AGENTD_TELEGRAM_API_BASE (one underscore) would be ignored without a word."""
    rest = name[len(ENV_PREFIX) :].lower()
    for section, model in config.model_fields.items():
        prefix = f"{section}_"
        annotation = model.annotation
        keys = getattr(_model_in(annotation), "model_fields", {})
        if rest.startswith(prefix) and rest[len(prefix) :] in keys:
            fixed = f"{ENV_PREFIX}{section.upper()}__{rest[len(prefix) :].upper()}"
            raise ConfigError(
                f"environment variable {name} is not read: between the section and the key "
                f"there are two underscores ({fixed}); {ENV_SYNTAX}"
            )


def _apply_env_overrides(
    data: dict[str, Any], env: dict[str, str], config: type[Config]
) -> dict[str, str]:
    """Apply AGENTD_<SECTION>__<KEY> variables; return {dotted key: variable name}."""
    applied: dict[str, str] = {}
    for name, raw in env.items():
        if name.startswith(ENV_PREFIX) and "__" not in name:
            _check_single_underscore(name, config)
        if not name.startswith(ENV_PREFIX) or "__" not in name or name == "AGENTD_CONFIG":
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    f"environment variable {name}: {'.'.join(path[:-1])} is not a section; "
                    f"use AGENTD_<SECTION>__<KEY>, {ENV_SYNTAX}"
                )
            node = child
        node[path[-1]] = _parse_env_value(raw)
        applied[_new_spelling(".".join(path), config)] = name
    return applied


def _new_spelling(dotted: str, config: type[Config]) -> str:
    """AGENTD_WEB__PROVIDER sets tools.web.provider: errors name the variable all the same."""
    for old, new in config.old_spellings().items():
        if new is not None and (dotted == old or dotted.startswith(old + ".")):
            return new + dotted[len(old) :]
    return dotted


def _model_in(annotation: Any) -> Any:
    """The pydantic model inside a field's annotation (`X`, `X | None`, `list[X]`), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None


def _keys_at(path: tuple[Any, ...], config: type[Config]) -> list[str]:
    """The keys the section at `path` has (("mail", 0) is a [[mail]] account)."""
    model: Any = config
    for part in path:
        if isinstance(part, int):
            continue  # an item of a list: the item's model is already the one found
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = _model_in(field.annotation)
    fields = getattr(model, "model_fields", {})
    return [name for name, f in fields.items() if not f.exclude]


def _unknown_key(err: Any, key: str, config: type[Config]) -> str:
    name = str(err["loc"][-1])
    if name in {"token", "bot_token", "api_key", "anthropic_api_key", "password"}:
        return f"{key}: secrets are not read from the config file; set them in the environment"
    close = difflib.get_close_matches(name, _keys_at(tuple(err["loc"][:-1]), config), n=1)
    hint = f"did you mean {close[0]}?" if close else "see config.example.toml for the keys"
    return f"{key}: unknown key; {hint}"


def _describe(
    exc: ValidationError, source: Path | None, from_env: dict[str, str], config: type[Config]
) -> str:
    """Every unknown key (each with the nearest real one), else the first error."""
    errors = exc.errors()
    messages = []
    for err in errors:
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if _variable(key, from_env) is None and err["type"] == "extra_forbidden":
            messages.append(_unknown_key(err, key, config))
    if not messages:
        return _first_error(errors[0], source, from_env, config)
    where = f"{source}: " if source else ""
    return where + "; ".join(messages)


def _variable(key: str, from_env: dict[str, str]) -> str | None:
    return next(
        (var for dotted, var in from_env.items() if key == dotted or key.startswith(dotted + ".")),
        None,
    )


# Where the config file itself holds secrets: an MCP server's env values and headers.
_SECRET_TABLES = {"env", "headers"}
# A key named like a secret: its value is not echoed unless the schema declares the key (the
# declared ones that match are variable names, `*_env`, or counts, `max_tokens`).
_SECRET_NAME = re.compile(r"token|secret|passw|api_?key|private_?key|auth|credential|cookie", re.I)


def _got(err: Any, config: type[Config]) -> str:
    """What the key was given, in a form safe to print (stderr is the journal under systemd):
    a scalar as it is; a table or a list by its shape, as either may hold secrets (an MCP
    server's entry holds its env and headers); nothing under a place that holds secrets."""
    loc = tuple(err["loc"])
    names = [str(part) for part in loc]
    if names[:2] == ["tools", "mcp"] and _SECRET_TABLES & set(names[3:]):
        return " (the value is not shown: it may be a secret)"
    if loc and _SECRET_NAME.search(names[-1]) and names[-1] not in _keys_at(loc[:-1], config):
        return " (the value is not shown: it may be a secret)"
    value = err.get("input")
    if isinstance(value, dict):
        keys = ", ".join(sorted(map(str, value))) or "none"
        shown = "the table has" if err["type"] == "missing" else "got a table with keys"
        return f" ({shown} {keys})"
    if isinstance(value, list | tuple):
        return f" (got a list of {len(value)})"
    return f" (got {value!r})"


def _first_error(
    err: Any, source: Path | None, from_env: dict[str, str], config: type[Config]
) -> str:
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    variable = _variable(key, from_env)
    got = _got(err, config)
    if variable is not None:
        if err["type"] == "extra_forbidden":
            return (
                f"environment variable {variable}: {key} is not a config key; see "
                "config.example.toml for the keys that exist"
            )
        return f"environment variable {variable}: {key}: {err['msg']}{got}; {ENV_SYNTAX}"
    where = f"{source}: " if source else ""
    message = str(err["msg"]).removeprefix("Value error, ")
    if message.startswith(f"{key}."):  # a section's check that names its own key
        return f"{where}{message}"
    return f"{where}{key}: {err['msg']}{got}"


def load_config(
    path: str | Path | None = None,
    env: dict[str, str] | None = None,
    sections: Sequence[Section[Any]] = (),
) -> Config:
    """Load, override from the environment and validate; raise ConfigError naming the key.

    `sections`: the chat channels' own (`agentd.channels.sections()`); a file with a section
    nobody declares is refused like any unknown key."""
    env = dict(os.environ) if env is None else env
    model = config_model(tuple(sections))
    source = find_config_file(path, env)
    data: dict[str, Any] = {}
    if source is not None:
        try:
            data = tomllib.loads(source.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    from_env = _apply_env_overrides(data, env, model)
    llm = data.setdefault("llm", {})
    for key, name in (("model", "ANTHROPIC_MODEL"), ("base_url", "ANTHROPIC_BASE_URL")):
        # The provider's variables beat the file (R-CFG-1); agentd's own AGENTD_LLM__… beat them.
        if isinstance(llm, dict) and env.get(name) and f"llm.{key}" not in from_env:
            llm[key], from_env[f"llm.{key}"] = env[name], name
    try:
        config = model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source, from_env, model)) from None
    if source is not None:
        source = source.absolute()
        resolve_paths(config, source.parent, from_env)
    try:
        stored = read_secrets_file((source.parent if source else Path()) / SECRETS_FILE)
    except SecretFileError as exc:
        raise ConfigError(str(exc)) from None
    config.secrets = core_secrets(SecretSource(env, stored))
    config.stored_secrets = stored
    config.source = str(source) if source else None
    return config
