"""Every built-in capability, in the order their tools are offered: the one list the daemon,
`agentd doctor` and the redactor loop over. A built-in comes in through the same door an
outside plugin does (`agentd.tools.capability`)."""

from __future__ import annotations

from agentd.automations import capability as automations
from agentd.browser import capability as browser
from agentd.calendar import capability as calendar
from agentd.channels import channels
from agentd.config import Config, SecretSource, read_secret
from agentd.dashboard import capability as dashboard
from agentd.hands import capability as hands
from agentd.knowledge import capability as documents
from agentd.mail import capability as mail
from agentd.media import capability as media
from agentd.memory import capability as memory
from agentd.schedule import capability as schedule
from agentd.skills import capability as skills
from agentd.tasks import capability as tasks
from agentd.tools import mcp, plugins
from agentd.tools.capability import Capability
from agentd.watch import capability as watch
from agentd.web import capability as web

# Plugins after MCP, and the hands after them (their tools yield a taken name); background
# tasks last, as they may be handed any tool before them.
BUILTIN = (
    memory.capability,
    documents.capability,
    web.capability,
    media.capability,
    schedule.capability,
    watch.capability,
    mail.capability,
    calendar.capability,
    skills.capability,
    mcp.capability,
    automations.capability,
    dashboard.capability,
    browser.capability,
    plugins.capability,
    hands.capability,
    tasks.capability,
)


def capabilities() -> list[Capability]:
    return [make() for make in BUILTIN]


def secret_values(config: Config, source: SecretSource) -> list[str]:
    """Every secret the configuration names, read through the one reader: the model's key and
    each `[llm.providers.*]` one, each channel's, then each capability's (what the redactor
    hides)."""
    key = config.secrets.anthropic_api_key
    found = [key.get_secret_value()] if key is not None else []
    found += [read_secret(p.api_key_env, source) for p in config.llm.providers.values()]
    for channel in channels():
        found += [read_secret(name, source) for name in channel.secret_names(config)]
        found += channel.secret_values(config)
    for cap in capabilities():
        found += [read_secret(name, source) for name in cap.secret_names(config)]
        found += cap.secret_values(config)
    return [value.strip() for value in found if value and value.strip()]
