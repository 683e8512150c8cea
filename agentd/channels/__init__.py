"""Every chat network agentd speaks, in one list: the daemon opens each configured one, `agentd
doctor` checks them and the redactor hides their secrets, none of them naming a network.

A new channel is its own package (its adapter, following `agentd.chat.channel.Channel`) plus
one entry here. Order matters only for ties: the first channel's command name is the one
"/help@name" is checked against first.
"""

from __future__ import annotations

from collections.abc import Callable

from agentd.chat.channel import Channel
from agentd.config import Config
from agentd.matrix import channel as matrix
from agentd.telegram import channel as telegram

CHANNELS: tuple[Callable[[], Channel], ...] = (telegram.channel, matrix.channel)


def channels() -> list[Channel]:
    """Every known channel, configured or not (doctor and the redactor look at all)."""
    found = [make() for make in CHANNELS]
    blocks = [c.block for c in found]
    if len(set(blocks)) != len(blocks):
        raise RuntimeError(f"two channels share an id block: {blocks}")
    return found


def packages() -> list[str]:
    """Each channel's package (`telegram`, …): the only code that reads a network's ids and
    talks to it directly (the source checks in tests/ exempt them, and only them)."""
    return [make.__module__.split(".")[1] for make in CHANNELS]


def configured(config: Config) -> list[Channel]:
    """The channels this configuration turns on; with none, the first of the list, so that
    `agentd run` and `agentd doctor` say what it is missing (Telegram's token)."""
    found = channels()
    return [c for c in found if c.enabled(config)] or found[:1]
