"""The calendar capability: `[[calendar]]` accounts, their tools and their doctor check.

icalendar and caldav are imported only when an account is configured: they cost start-up
time for nobody else.
"""

from __future__ import annotations

from agentd.config import Config, read_secret
from agentd.runtime.redact import login_forms
from agentd.tools.capability import Check, Context, Contribution, Probe, Simple


def _secrets(config: Config) -> list[str]:
    return [c.password_env for c in config.calendar]


def _doctor(config: Config, probe: Probe) -> list[Check]:
    if not config.calendar:
        return []
    from agentd.calendar.check import check_calendar

    found = [check_calendar(c, probe.secrets, config.agent.timezone) for c in config.calendar]
    return [Check(name, ok, detail) for name, ok, detail in found]


async def _build(ctx: Context) -> Contribution:
    if not ctx.config.calendar:
        return Contribution()
    from agentd.calendar.tools import build_calendar_tools

    # CalDAV and a feed send the password base64-encoded with the user (HTTP Basic).
    for account in ctx.config.calendar:
        password = read_secret(account.password_env, ctx.secrets)
        if account.username and password:
            ctx.redactor.learn(login_forms(account.username, password), lasting=True)
    return Contribution(
        tools=build_calendar_tools(ctx.config, ctx.secrets),
        about="look at your calendar and add events",
    )


def capability() -> Simple:
    return Simple("calendar", build=_build, secrets=_secrets, doctor=_doctor)
