"""The `shell` tool: one command line in the sandbox, under the owner's approval.

High risk by default. `assess` lowers a single call only when it is a plain command (rules.py)
on the read-only allowlist or matching an "Always allow this" rule, with the network off, in
an untainted turn, in the real sandbox; everything else asks. The card shows the exact command,
the folder, the network and the limits (`card_text`). The call is at-most-once: after a crash
during it the turn says "outcome unknown" and never runs it again by itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agentd.access.approvals import one_line
from agentd.config import Config, ShellConfig
from agentd.db import Database
from agentd.hands import cgroup, rules
from agentd.hands.cgroup import CgroupHost
from agentd.hands.files import Workspaces, not_in_groups
from agentd.hands.sandbox import (
    INSIDE_WORKSPACE,
    Limits,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    probe,
    run_sandboxed,
)
from agentd.hands.workspace import WorkspaceError, split
from agentd.ledger import audit
from agentd.tools.base import (
    ApprovalCard,
    Assessment,
    CallState,
    Tool,
    ToolContext,
    ToolError,
)
from agentd.tools.policy import OUTSIDE_REASON
from agentd.tools.toolset import Toolset

log = logging.getLogger("agentd.hands")
# Progress(ctx, elapsed seconds, finished): shows "running…" in the chat, edited in place.
Progress = Callable[[ToolContext, float, bool], Awaitable[None]]


class ShellArgs(BaseModel):
    command: str = Field(
        description="One command line for /bin/sh, e.g. `df -h`.", min_length=1, max_length=4000
    )
    cwd: str = Field(
        default="",
        max_length=1024,
        description="Folder inside the workspace to run in; empty: its top.",
    )
    network: bool = Field(
        default=False,
        description="Needs the network (only for programs the owner allows; always asks).",
    )
    background: bool = Field(
        default=False,
        description="For long jobs: run it as a "
        "background job; the user gets a notice when it ends.",
    )


def limits_of(shell: ShellConfig) -> Limits:
    return Limits(
        cpu_seconds=shell.cpu_seconds,
        memory_mb=shell.memory_mb,
        max_processes=shell.max_processes,
        wall_seconds=shell.wall_seconds,
        output_bytes=shell.output_bytes,
        max_file_mb=shell.max_file_mb,
        tmp_mb=shell.tmp_mb,
    )


def sandbox_of(config: Config, cgroups: CgroupHost | None = None) -> Sandbox:
    """The sandbox from the config; `cgroups`: where each command's cgroup is made (the
    daemon looks once, `cgroup.find`); None: none, and every card says memory is unbounded."""
    shell = config.tools.shell
    hide = [str(config.db_path.parent)]
    if config.source:
        hide.append(str(Path(config.source).resolve().parent))
    return Sandbox(
        mode=shell.sandbox,
        bwrap=shell.bwrap,
        run_as=shell.run_as,
        hide=tuple(hide),
        cgroups=cgroups or CgroupHost(),
    )


def memory_line(limits: Limits, cgroups: CgroupHost) -> str:
    """What the card promises of memory and processes: only what is enforced."""
    if cgroups.enforced:
        return (
            f"{limits.memory_mb} MB memory in all (shared memory and /tmp included), "
            f"{limits.max_processes} processes"
        )
    return (
        f"{limits.memory_mb} MB address space per process, NOT a bound on the command's "
        f"memory (no cgroup here: {cgroups.why}), {limits.max_processes} processes of the "
        "sandbox user"
    )


def inside_cwd(cwd: str) -> str:
    parts = split(cwd)  # refuses .., absolute paths
    return "/".join([INSIDE_WORKSPACE, *parts])


@dataclass(frozen=True)
class ShellPolicy:
    """What decides a call's risk; pure but for the rule look-up."""

    shell: ShellConfig
    book: rules.RuleBook

    def assess(self, args: ShellArgs, state: CallState) -> Assessment | None:
        if self.shell.sandbox == "none":
            return Assessment(risk="high", reason="commands run WITHOUT a sandbox here")
        plain = rules.parse(args.command)
        # Read-only and offline, it can neither send data out nor change anything, whatever
        # the model has read: its output taints the turn, which is what outside content needs.
        if plain.ok and not args.network and plain.argv[0] in self.shell.allowlist:
            return Assessment(risk="low", reason="on the read-only allowlist", egress=False)
        if state.tainted_by:
            sources = ", ".join(state.tainted_by[:3])
            return Assessment(risk="high", reason=f"{OUTSIDE_REASON} ({sources})")
        if args.network:
            return Assessment(risk="high", reason="it asks for the network")
        if not plain.ok:
            return Assessment(risk="high", reason=plain.why_not)
        # A rule was pressed on a foreground card (its wall time, one run at a time): a
        # background job runs 30 times longer, beside others, so it asks.
        rule = (
            None if args.background else self.book.match(plain.argv, state.chat_id, state.user_id)
        )
        if rule is not None:
            return Assessment(risk="low", reason=f"always-allow rule #{rule.id}")
        return None

    def how_approved(self, args: ShellArgs, state: CallState) -> str:
        verdict = self.assess(args, state)
        if verdict is not None and verdict.risk == "low":
            return verdict.reason
        return "asked"


def _state(ctx: ToolContext) -> CallState:
    return CallState(
        tainted_by=ctx.tainted_by,
        chat_id=ctx.chat_id,
        user_id=ctx.user_id,
        chat_kind=ctx.chat_kind,
    )


def card_text(shell: ShellConfig, args: ShellArgs, cgroups: CgroupHost | None = None) -> str:
    """The approval card's body for a command: exactly what will run, where, and how fenced
    (`cgroups`: where its memory bound is enforced; None: nowhere)."""
    lim = limits_of(shell)
    sandbox = (
        "bubblewrap (read-only system, only the workspace writable)"
        if shell.sandbox == "bwrap"
        else "NONE — runs directly on the server"
    )
    wall = shell.background_wall_seconds if args.background else lim.wall_seconds
    # One line per field, each escaped: a newline in the command cannot draw a fake
    # "network: off" line on the card.
    folder = inside_cwd(args.cwd) if _cwd_ok(args.cwd) else args.cwd
    return "\n".join(
        [
            f"$ {one_line(args.command, limit=4000)}",
            "",
            f"folder:  {one_line(folder, limit=1100)}",
            f"network: {'ON' if args.network else 'off'}",
            f"sandbox: {sandbox}",
            f"limits:  {wall:g} s wall, {lim.cpu_seconds} s CPU per process, "
            f"{memory_line(lim, cgroups or CgroupHost())}",
            *(["mode:    background job (a notice when it ends)"] if args.background else []),
        ]
    )


def _cwd_ok(cwd: str) -> bool:
    try:
        split(cwd)
    except WorkspaceError:
        return False
    return True


def render_result(args: ShellArgs, result: RunResult, limits: Limits) -> str:
    if result.stopped == "wall_time":
        head = f"Stopped after the wall-time limit of {limits.wall_seconds:g} s (killed)."
    elif result.stopped == "output":
        head = "Stopped: it wrote far more output than can be kept (killed)."
    elif result.memory_exceeded and result.exit_code != 0:
        head = (
            f"Killed: it used more than its memory limit of {limits.memory_mb} MB (shared "
            "memory and /tmp count too)."
        )
    elif result.exit_code is None:
        head = f"Killed by signal {result.signal} (a limit: CPU, memory or processes?)."
    else:
        head = f"Exit code {result.exit_code}."
    if result.memory_exceeded and result.exit_code == 0:
        head += f" A process of it was killed at the memory limit of {limits.memory_mb} MB."
    cut = " (output cut: head and tail kept)" if result.truncated else ""
    body = result.output or "(no output)"
    return (
        f"{head} {result.duration_ms / 1000:.2f} s, {result.bytes_out} bytes of "
        f"output{cut}.\n{body}"
    )


@dataclass(frozen=True)
class ShellDeps:
    """What the shell needs, complete when built (shell_deps): nothing is set on it later."""

    config: Config
    db: Database
    sandbox: Sandbox
    policy: ShellPolicy
    progress: Progress | None = None
    # Starts the background job's workflow (hands/background.py); None: no background jobs.
    start_background: Callable[[ToolContext, ShellArgs, str], Awaitable[str]] | None = None
    redact: Callable[[str], str] = str


async def _audit(
    deps: ShellDeps,
    ctx: ToolContext,
    args: ShellArgs,
    approval: str,
    result: RunResult | None,
    error: str = "",
) -> None:
    detail: dict[str, Any] = {
        "command": ctx.redact(args.command)[:1000],
        "cwd": args.cwd or ".",  # relative to the workspace; "." is its top
        "network": args.network,
        "approval": approval,
        "sandbox": deps.sandbox.mode,
    }
    if result is not None:
        detail |= {
            "exit_code": result.exit_code,
            "signal": result.signal,
            "stopped": result.stopped,
            "duration_ms": result.duration_ms,
            "bytes_out": result.bytes_out,
        }
    if error:
        detail["error"] = error
    await deps.db.write(
        lambda conn: audit.record(
            conn,
            "shell",
            chat_id=ctx.chat_id,
            user_id=ctx.user_id,
            instance_id=ctx.instance_id,
            source_key=f"{ctx.instance_id}:shell:{ctx.tool_use_id}",
            detail=detail,
        )
    )


def check_network(shell: ShellConfig, args: ShellArgs) -> None:
    if args.network:
        plain = rules.parse(args.command)
        if not plain.ok:
            raise ToolError(
                "the network is only given to one plain program, not to a "
                f"command line where {plain.why_not}"
            )
        if plain.argv[0] not in shell.network_programs:
            raise ToolError(
                f"the owner's policy gives no network to {plain.argv[0]!r}; run it "
                "with network off, or ask the owner to add it to [tools.shell] "
                "network_programs"
            )


async def run_command(
    deps: ShellDeps,
    ctx: ToolContext,
    args: ShellArgs,
    *,
    approval: str | None = None,
    wall: float | None = None,
    progress: bool = True,
) -> str:
    """Run one command in the sandbox, audited; the text the model (or the notice) gets."""
    shell = deps.config.tools.shell
    check_network(shell, args)
    try:
        cwd = inside_cwd(args.cwd)
        spaces = Workspaces.from_config(deps.config)
        workspace = await asyncio.to_thread(spaces.ensure, ctx.user_id)
    except WorkspaceError as exc:
        raise ToolError(str(exc)) from None
    if approval is None:
        approval = deps.policy.how_approved(args, _state(ctx))
    limits = limits_of(shell)
    if wall is not None:
        limits = replace(limits, wall_seconds=wall)
    task = asyncio.ensure_future(
        _run_or_refuse(
            args.command,
            workspace,
            sandbox=deps.sandbox,
            limits=limits,
            cwd=cwd,
            network=args.network,
        )
    )
    try:
        result = await _with_progress(
            deps if progress else replace(deps, progress=None), ctx, task, shell.progress_after
        )
    except asyncio.CancelledError:
        await _audit(deps, ctx, args, approval, None, error="cancelled (process tree killed)")
        raise
    await _audit(deps, ctx, args, approval, result)
    return ctx.redact(render_result(args, result, limits))


async def _run_or_refuse(command: str, workspace: Any, **kwargs: Any) -> RunResult:
    try:
        return await run_sandboxed(command, workspace, **kwargs)
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None


async def _with_progress(
    deps: ShellDeps, ctx: ToolContext, task: asyncio.Future[RunResult], after: float
) -> RunResult:
    started = time.monotonic()
    shown = False
    try:
        while True:
            wait = after if not shown else 5.0
            done, _ = await asyncio.wait({task}, timeout=wait)
            if done:
                break
            if deps.progress is not None:
                shown = True
                await _safe_progress(deps.progress, ctx, time.monotonic() - started, False)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task}, timeout=5.0)  # the runner kills the tree, then returns
        raise
    if shown and deps.progress is not None:
        await _safe_progress(deps.progress, ctx, time.monotonic() - started, True)
    return task.result()


async def _safe_progress(progress: Progress, ctx: ToolContext, elapsed: float, end: bool) -> None:
    try:
        await progress(ctx, elapsed, end)
    except Exception as exc:  # progress is a courtesy; the command's result is what counts
        log.info("could not show progress", extra={"error": type(exc).__name__})


SHELL_ABOUT = (
    "Run one command line on the server in a sandbox: the system is read-only, only "
    "your workspace (/workspace, the current folder) is writable, /tmp is private, "
    "no network unless allowed. Asks the owner first unless the command is on the read-only "
    "allowlist or an always-allow rule."
)


def shell_tool(deps: ShellDeps) -> Tool:
    """The `shell` tool over `deps`: high risk unless `assess` finds the call harmless, the
    card shows exactly what runs, and a call runs at most once (a command may send data out:
    egress)."""
    shell_config = deps.config.tools.shell
    # A command reads its user's workspace: in a group every member would read the output.
    hands = Toolset(timeout=shell_config.wall_seconds + 30, guard=not_in_groups)

    def card(args: ShellArgs) -> ApprovalCard:
        return ApprovalCard(
            text=card_text(shell_config, args, deps.sandbox.cgroups),
            always_allow=offer(shell_config, args),
            whole=True,  # command, folder, network and background: every argument
        )

    # A command's output is whatever the files, the programs and (with the network) the
    # servers it touched wrote: outside content, so it taints.
    @hands.tool(
        risk="high",
        egress=True,
        taints=True,
        at_most_once=True,
        assess=deps.policy.assess,
        card=card,
        description=SHELL_ABOUT,
    )
    async def shell(ctx: ToolContext, args: ShellArgs) -> str:
        if not args.background:
            return await run_command(deps, ctx, args)
        if deps.start_background is None:
            raise ToolError("background jobs are not available here; run it without background")
        check_network(shell_config, args)
        approval = deps.policy.how_approved(args, _state(ctx))
        return await deps.start_background(ctx, args, approval)

    return shell


def offer(shell: ShellConfig, args: ShellArgs) -> list[str] | None:
    """The words an "Always allow this" rule would cover; None where no rule may be made."""
    plain = rules.parse(args.command)
    if not plain.ok or args.network or args.background or shell.sandbox != "bwrap":
        return None
    if rules.executes_files(plain.argv[0]):
        return None  # it runs what a file or argument says: every call asks
    return plain.argv


async def shell_deps(
    config: Config,
    db: Database,
    progress: Progress | None = None,
    *,
    redact: Callable[[str], str] = str,
    start_background: Callable[[ToolContext, ShellArgs, str], Awaitable[str]] | None = None,
) -> tuple[ShellDeps | None, str | None]:
    """What the shell tool needs, or None and why (disabled, or no working sandbox here).

    `redact` cleans a background job's notice; `start_background` starts a job's workflow
    (hands/background.py `job_starter`), None: no background jobs.
    """
    shell = config.tools.shell
    if not shell.enabled:
        return None, None
    sandbox = sandbox_of(config, await asyncio.to_thread(cgroup.find))
    if not sandbox.cgroups.enforced:
        log.warning("shell memory unbounded", extra={"why": sandbox.cgroups.why})
    spaces = Workspaces.from_config(config)
    try:
        await asyncio.to_thread(spaces.ensure_base)
    except (OSError, WorkspaceError) as exc:
        return None, f"the workspace {spaces.root} cannot be created: {exc}"
    problem = await asyncio.to_thread(probe, sandbox, spaces.base())
    if problem:
        return None, f"the shell tool is not offered: {problem}"
    policy = ShellPolicy(shell=shell, book=rules.RuleBook(config.db_path))
    deps = ShellDeps(
        config=config,
        db=db,
        sandbox=sandbox,
        policy=policy,
        progress=progress,
        start_background=start_background,
        redact=redact,
    )
    return deps, None


def chat_progress(outbox: Any) -> Progress:
    """ "running… 12 s" under the command, edited in place; on the end, "finished after …"."""
    messages: dict[tuple[str, str], int] = {}

    async def show(ctx: ToolContext, elapsed: float, finished: bool) -> None:
        key = (ctx.instance_id, ctx.tool_use_id)
        text = f"⏳ finished after {elapsed:.0f} s" if finished else f"⏳ running… {elapsed:.0f} s"
        if key in messages:
            await outbox.edit_text(ctx.chat_id, messages[key], text)
            if finished:
                messages.pop(key, None)
        elif not finished:
            messages[key] = await outbox.send_text(ctx.chat_id, text)

    return show
