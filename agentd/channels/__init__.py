"""Every chat network agentd speaks, in one list: the daemon opens each configured one, `agentd
doctor` checks them and the redactor hides their secrets, the configuration file gets their
sections and the database their tables, none of them naming a network.

A new channel is its own package (its adapter, following `agentd.chat.channel.Channel`, with
its config section and its migrations) plus one entry here. Order matters for ties (the
first channel's command name is the one "/help@name" is checked against first) and for the
order the channels' migrations run in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentd.chat.channel import Channel
from agentd.chat.kept import KeptTable
from agentd.config import Config, Section, config_model
from agentd.config import load_config as load_core_config
from agentd.db.migrations import MIGRATIONS, Migration
from agentd.matrix import channel as matrix
from agentd.telegram import channel as telegram
from agentd.webchat import channel as webchat

CHANNELS: tuple[Callable[[], Channel], ...] = (telegram.channel, matrix.channel, webchat.channel)


def channels() -> list[Channel]:
    """Every known channel, configured or not (doctor and the redactor look at all)."""
    found = [make() for make in CHANNELS]
    blocks = [c.block for c in found]
    if len(set(blocks)) != len(blocks):
        raise RuntimeError(f"two channels share an id block: {blocks}")
    for c in found:
        strays = [m.name for m in c.migrations if not m.name.startswith(f"{c.name}/")]
        if c.section.name != c.name or strays:
            raise RuntimeError(
                f"channel {c.name}: its config section and migrations are named after it "
                f"([{c.section.name}], {strays})"
            )
    return found


def sections() -> tuple[Section[Any], ...]:
    """Each channel's own configuration section (`[telegram]`, `[matrix]`)."""
    return tuple(c.section for c in channels())


def config_class() -> type[Config]:
    """`Config` with every channel's section: what the file is validated against."""
    return config_model(sections())


def load_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> Config:
    """The configuration file, every channel's section validated by the channel's model
    (`agentd.config.load_config` with this list's sections)."""
    return load_core_config(path, env, sections=sections())


def migrations() -> list[Migration | tuple[str, str]]:
    """The whole schema: the core's list, then each channel's set in this list's order (a
    channel's tables may name the core's, never the other way round)."""
    found: list[Migration | tuple[str, str]] = list(MIGRATIONS)
    for c in channels():
        found.extend(c.migrations)
    return found


def kept_tables(config: Config) -> list[KeptTable]:
    """Every channel's own tables retention keeps short, configured or not: rows from when a
    channel was on still age out after it is turned off."""
    return [table for c in channels() for table in c.kept(config)]


def packages() -> list[str]:
    """Each channel's package (`telegram`, …): the only code that reads a network's ids and
    talks to it directly (the source checks in tests/ exempt them, and only them)."""
    return [make.__module__.split(".")[1] for make in CHANNELS]


def configured(config: Config) -> list[Channel]:
    """The channels this configuration turns on; with none, the first of the list, so that
    `agentd run` and `agentd doctor` say what it is missing (Telegram's token)."""
    found = channels()
    return [c for c in found if c.enabled(config)] or found[:1]
