"""The automations capability: the owner's workflows (loaded from their folder), /run and its
answer buttons, their model tools, the webhook listener, and the owner told when one fails."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from agentd.chat.command import ChatCommand
from agentd.config import Config, read_secret
from agentd.durable.store import InstanceRecord
from agentd.tools import ToolRegistry
from agentd.tools.capability import (
    Check,
    Checks,
    Context,
    Contribution,
    Probe,
    ServiceError,
    Simple,
)

log = logging.getLogger("agentd")


def _secrets(config: Config) -> list[str]:
    hooks = [hook.secret_env for hook in config.hooks.routes.values()]  # webhook HMAC secrets
    return hooks + list(config.automations.secrets)  # what step.secret may read


async def _build(ctx: Context) -> Contribution:
    from agentd.automations.catalog import builtin_names, load_catalog
    from agentd.automations.runtime import CALLBACK_PREFIX, Runtime

    catalog = load_catalog(ctx.config, builtin_names())
    runtime = Runtime(
        config=ctx.config,
        db=ctx.db,
        clock=ctx.clock,
        catalog=catalog,
        outbox=ctx.outbox,
        llm=ctx.llm,
        kick=ctx.engine.kick,
        redact=ctx.redactor,
        register=ctx.engine.register,
    )
    await runtime.record_loaded()
    run = ChatCommand(
        "run",
        runtime.run_command,
        "Run one of your automations: /run NAME {json}",
        owner_only=True,
    )
    if catalog.names():
        log.info("automations loaded", extra={"automations": catalog.names()})

    def bind(registry: ToolRegistry) -> None:
        runtime.registry = registry

    async def on_unfinished(inst: InstanceRecord) -> None:
        if inst.status == "errored":  # a failed (or parked) automation tells the owner
            await runtime.notify_failure(ctx.engine.start, inst)

    async def listen() -> Callable[[], Awaitable[None]] | None:
        if not ctx.config.hooks.enabled:
            return None
        from agentd.automations.hooks import HookServer

        hooks = HookServer(ctx.config, runtime, ctx.engine.start, ctx.engine.poll_once, ctx.secrets)
        try:
            await hooks.start()
        except (OSError, ValueError) as exc:  # port taken, bad address, socket dir missing
            await hooks.close()
            listen = ctx.config.hooks.listen
            raise ServiceError(f"[automations.hooks] listen = {listen!r}: {exc}") from None
        return hooks.close  # closed first: no delivery is accepted that the engine will not see

    return Contribution(
        tools=runtime.model_tools(),
        workflows=runtime.workflows(),
        commands=[run],
        callbacks={CALLBACK_PREFIX: runtime.on_answer},
        about="run your automations",
        on_unfinished=on_unfinished,
        wired=[bind],
        start=[listen],
    )


def _doctor(config: Config, probe: Probe) -> list[Check]:
    """Each webhook route that refuses every delivery (no secret, or an automation the daemon
    did not load): the daemon only logs it at start, and a sender sees only 503s."""
    from agentd.automations.runs import last_loaded

    checks = Checks()
    if not config.hooks.enabled:
        return checks
    known = probe.read(last_loaded)  # None: no daemon has said what it loaded yet
    for name, hook in sorted(config.hooks.routes.items()):
        problems = []
        if not read_secret(hook.secret_env, probe.secrets):
            problems.append(
                f"its secret {hook.secret_env} is set nowhere (the environment, agentd.env, "
                "a systemd credential): set it and restart"
            )
        if hook.workflow and known is not None and hook.workflow not in known:
            problems.append(
                f"the daemon has not loaded its automation {hook.workflow!r}: check "
                "`agentd automations ls`, then `agentd automations reload`"
            )
        if problems:
            detail = "answers 503 to every delivery; " + "; ".join(problems)
            checks.add(f"webhook {name}", False, detail)
    return checks


def capability() -> Simple:
    return Simple("automations", build=_build, secrets=_secrets, doctor=_doctor)
