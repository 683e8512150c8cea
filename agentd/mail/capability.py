"""The mail capability: `[[mail]]` accounts, their tools, watchers, notices and doctor checks.

The IMAP and SMTP code is imported only when an account is configured.
"""

from __future__ import annotations

from agentd.config import Config, read_secret
from agentd.runtime.redact import login_forms
from agentd.tools.capability import Check, Context, Contribution, Probe, Simple


def _secrets(config: Config) -> list[str]:
    return [a.password_env for a in config.mail]


def _doctor(config: Config, probe: Probe) -> list[Check]:
    if not config.mail:
        return []
    from agentd.mail.check import check_account

    found = [c for account in config.mail for c in check_account(account, probe.secrets)]
    return [Check(name, ok, detail) for name, ok, detail in found]


async def _build(ctx: Context) -> Contribution:
    from agentd.mail.notice import make_notice_workflow

    # Registered with no account too: pending notices of an account since removed recover.
    flows = [make_notice_workflow(ctx.db, ctx.outbox, ctx.config.access.notices)]
    if not ctx.config.mail:
        return Contribution(workflows=flows)
    from agentd.mail.tools import build_mail_tools

    # SMTP's AUTH sends the password base64-encoded (with the login, for PLAIN).
    for account in ctx.config.mail:
        password = read_secret(account.password_env, ctx.secrets)
        if password:
            ctx.redactor.learn(login_forms(account.login, password), lasting=True)
    tools = build_mail_tools(ctx.config, ctx.db, ctx.secrets)
    watch = any(account.watch for account in ctx.config.mail)
    return Contribution(
        tools=tools,
        workflows=flows,
        start=[lambda: _watch(ctx)] if watch else [],
        about="read and sort your mail, and send it (I ask first)",
    )


async def _watch(ctx: Context) -> None:  # stopped with the other resources, after the engine
    from agentd.mail.watch import start_watchers

    watchers = start_watchers(ctx.config, ctx.db, ctx.outbox, ctx.engine, ctx.clock, ctx.secrets)
    if watchers is not None:
        ctx.stack.push_async_callback(watchers.stop)


def capability() -> Simple:
    return Simple("mail", build=_build, secrets=_secrets, doctor=_doctor)
