"""The model's watch tools: `watch_add` (asks first for a command source that is not plainly
allowed, and in a tainted turn), `watch_list`, `watch_remove`. The owner's, in private."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from agentd.config import Config
from agentd.db import Database
from agentd.hands import rules
from agentd.schedule import ScheduleError
from agentd.tools import Tool, ToolContext, ToolError, Toolset
from agentd.tools.base import Assessment, CallState
from agentd.tools.toolset import OwnerOnly
from agentd.watch import store
from agentd.watch.create import WatchRequest, create, report, summary, timing_bounded

NOT_THE_OWNERS = "Watches are the owner's: only they can add or change one, in their own chat."


class NoArgs(BaseModel):
    """watch_list takes nothing."""


class RemoveArgs(BaseModel):
    watch_id: str = Field(min_length=1, max_length=40, description="An id from watch_list.")


def tool_watch_id(instance_id: str, tool_use_id: str) -> str:
    """Derived from the tool call, so running the call again adds nothing new."""
    return "w" + hashlib.sha256(f"{instance_id}:{tool_use_id}".encode()).hexdigest()[:9]


def assess_add(config: Config) -> Callable[[Any, CallState], Assessment | None]:
    """A command source runs at every check: it asks as the shell does, unless it is one
    plain program on the read-only allowlist (every watch runs it with the network off)."""

    def assess(args: WatchRequest, state: CallState) -> Assessment | None:
        if args.source.kind != "command":
            return None
        if config.tools.shell.sandbox == "none":
            return Assessment(risk="high", reason="commands run WITHOUT a sandbox here")
        plain = rules.parse(args.source.command)
        if plain.ok and plain.argv[0] in config.tools.shell.allowlist:
            return None
        why = plain.why_not if not plain.ok else f"{plain.argv[0]!r} is not on the allowlist"
        return Assessment(
            risk="high", reason=f"the watch would run a command at every check ({why})"
        )

    return assess


def watch_tools(db: Database, config: Config, kick: Callable[[str], None]) -> list[Tool]:
    # watch_add searches a calendar rule in a bounded child, as `schedule` does: the same time.
    watches = Toolset(timeout=30, guard=OwnerOnly.of(config.access, NOT_THE_OWNERS))

    # A watch is an instruction left behind, like a schedule: egress (asks in a tainted turn).
    @watches.tool(
        risk="medium",
        egress=True,
        assess=assess_add(config),
        description="Check a page, mail folder, calendar, command's output, workspace file or "
        "automation's results at an interval, and tell the owner only when it changed and the "
        "condition holds (an unchanged check costs nothing).",
    )
    async def watch_add(ctx: ToolContext, args: WatchRequest) -> str:
        wid = tool_watch_id(ctx.instance_id, ctx.tool_use_id)
        by = f"tool:{ctx.instance_id}:user:{ctx.user_id}"
        now = ctx.now()
        try:
            w = await db.read(lambda conn: store.get_any(conn, wid))  # the call, run again
            if w is None:
                rec = await timing_bounded(args, now=now, config=config)
                w, _ = await db.write(
                    lambda conn: create(
                        conn,
                        args,
                        rec,
                        watch_id=wid,
                        user_id=ctx.user_id,
                        chat_id=ctx.chat_id,
                        chat_kind=ctx.chat_kind,
                        now=now,
                        config=config,
                        by=by,
                    )
                )
        except ScheduleError as exc:
            raise ToolError(f"Not added: {exc}.") from None
        kick(store.watch_key(wid))
        said = await db.read(lambda conn: report(conn, config, w, ctx.now()))
        return f"Watching. {said}\nThe first check runs now."

    @watches.tool(risk="low", description="List the owner's watches with their counts and cost.")
    async def watch_list(ctx: ToolContext, args: NoArgs) -> str:
        found = await db.read(store.list_watches)
        return "\n".join(summary(w) for w in found) or "No watches."

    @watches.tool(risk="medium", egress=True)
    async def watch_remove(ctx: ToolContext, args: RemoveArgs) -> str:
        """Stop and remove one of the owner's watches by id."""

        def remove(conn: Any) -> store.Watch:
            w = store.get(conn, args.watch_id)
            return store.set_state(conn, w, "removed", ctx.now(), by=f"tool:{ctx.user_id}")

        try:
            w = await db.write(remove)
        except store.NotFound as exc:
            raise ToolError(f"{exc}. Call watch_list for the ids.") from None
        return f"Removed watch {w.id} ({w.label})."

    return watches.tools()
