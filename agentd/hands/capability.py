"""The hands capability: the workspace's file tools and the sandboxed shell with its background
jobs. Their tools come after every other tool, so an owner's plugin or MCP tool of the same
name (say `delete_file`) keeps working and the built-in one is reported and not offered."""

from __future__ import annotations

import logging

from agentd.config import Config
from agentd.tools.capability import Check, Checks, Context, Contribution, Probe, Simple

log = logging.getLogger("agentd")


async def _build(ctx: Context) -> Contribution:
    from agentd.access import owners
    from agentd.hands import rules
    from agentd.hands.background import job_starter, make_job_workflow
    from agentd.hands.files import Workspaces, workspace_tools
    from agentd.hands.shell import chat_progress, shell_deps, shell_tool

    # "Always allow this" decides an approval: only an approver, on the card itself.
    may_approve = owners.resolve(ctx.config.access).may_approve
    part = Contribution(
        callbacks={rules.CALLBACK_PREFIX: rules.callback_handler(may_approve)},
        about="work with files in my workspace",
        about_tools={"shell": "run commands on this server (I ask before anything risky)"},
        # A delete purges its own workspace's trash; this reaches every one daily.
        sweeps={"trash": Workspaces.from_config(ctx.config).purge_trash},
    )

    files = ctx.shared["files"]
    tools = workspace_tools(ctx.config, ctx.db, files.download)
    sdeps, problem = await shell_deps(
        ctx.config,
        ctx.db,
        chat_progress(ctx.outbox),
        redact=ctx.redactor,
        start_background=job_starter(
            ctx.engine, ctx.db, ctx.config.tools.shell.max_background_jobs
        ),
    )
    if problem:
        log.warning("tool problem", extra={"source": "shell", "problem": problem})
    if sdeps is None:
        part.late_tools = tools
        return part
    part.late_tools = [*tools, shell_tool(sdeps)]
    part.workflows = [make_job_workflow(sdeps, ctx.outbox)]
    return part


def _doctor(config: Config, probe: Probe) -> list[Check]:
    """Whether the shell tool is offered: bubblewrap present and able to make namespaces."""
    from agentd.hands.sandbox import probe as sandbox_probe
    from agentd.hands.shell import sandbox_of

    results = Checks()
    shell = config.tools.shell
    if not shell.enabled:
        results.add("shell", True, "off ([tools.shell] enabled = false)")
        return results
    if shell.sandbox == "none":
        why = 'UNSANDBOXED: [tools.shell] sandbox = "none"; commands run directly on this server'
        results.add("shell", True, f"{why} (every approval card says so)", warn=True)
        return results
    from agentd.hands.files import Workspaces
    from agentd.hands.workspace import WorkspaceError

    workspace = Workspaces.from_config(config).base()
    try:
        workspace.ensure()  # created at the daemon's start anyway; the probe binds it
    except (OSError, WorkspaceError) as exc:
        results.add(
            "shell",
            True,
            f"not offered: the workspace {workspace.root} cannot be "
            f"created ({exc}); set [tools.workspace] path",
            warn=True,
        )
        return results
    problem = sandbox_probe(sandbox_of(config), workspace.root)
    if problem:
        # A warning: agentd runs without the shell; the owner decides whether to fix it.
        results.add("shell", True, f"not offered: {problem}", warn=True)
    else:
        results.add(
            "shell", True, "bubblewrap sandbox works (namespaces, seccomp, read-only system)"
        )
        name, said, unbounded = _memory_check()
        results.add(name, True, said, warn=unbounded)
        from agentd.hands.unitcheck import check_under_unit

        # The probe above ran with the owner's rights; the service runs under its unit's.
        works, said = check_under_unit(workspace.root, shell.run_as)
        results.add("shell (service)", works is not False, said, warn=works is not True)
    return results


def _memory_check() -> tuple[str, str, bool]:
    """Whether each command's memory is bounded by a cgroup here, or only per process."""
    from agentd.hands.cgroup import find

    host = find()
    if host.enforced:
        said = f"each command in a cgroup of its own (cgroup {host.kind}): memory_mb bounds it all"
        return "shell memory", said, False
    said = (
        f"NOT bounded per command for agentd started like this: {host.why}. Only each "
        "process's address space is limited (shared memory and /tmp escape it), and every "
        "approval card says so. The service under the shipped unit has a delegated cgroup of "
        "its own: its start-up log says `shell memory unbounded` if it has none"
    )
    return "shell memory", said, True


def capability() -> Simple:
    return Simple("hands", build=_build, doctor=_doctor)
