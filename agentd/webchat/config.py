"""`[webchat]`: the web chat's own settings, declared through the channel door (`SECTION`,
`agentd.config.sections`). Off unless `enabled`; it needs `[dashboard] enabled`, whose page
it is."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agentd.config import Config
from agentd.config.sections import Section


class WebChatConfig(BaseModel):
    """A chat page in the dashboard for the owner (docs/webchat.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False


SECTION = Section("webchat", WebChatConfig)


def settings(config: Config) -> WebChatConfig:
    """`[webchat]` of `config` (its defaults when the file has none)."""
    found = SECTION.of(config)
    assert found is not None  # not optional: absent is the defaults, off
    return found
