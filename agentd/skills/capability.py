"""The skills capability: Agent Skills folders the owner enabled, their tools, the listing the
prompt reads, and the doctor lines for skills that are invalid or held back."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from agentd.config import Config
from agentd.skills.names import USE_SKILL
from agentd.tools.capability import Check, Checks, Context, Contribution, Probe, Simple


async def _build(ctx: Context) -> Contribution:
    from agentd.skills.command import command

    about = "follow the skills you installed, listed by /skills"
    if not ctx.config.skills.enabled:
        return Contribution(commands=[command(ctx.config, ctx.db)], about=about)
    from agentd.skills import store
    from agentd.skills import tools as skills

    tell = _teller(ctx)
    tools, _, held = await skills.start(ctx.config, ctx.db, ctx.clock.now(), tell)
    db = ctx.db

    async def tell_held() -> None:
        for h in held:
            await tell(h.name, h.content, h.why)

    async def listing() -> tuple[tuple[str, str], ...]:
        return await db.read_inline(store.listing)

    def used(tool: str, args: Mapping[str, Any]) -> str | None:
        return str(args.get("name")) if tool == USE_SKILL else None

    turn = {"skill_listing": listing, "listed_use": used}
    return Contribution(
        tools=tools,
        turn=turn,
        start=[tell_held],
        commands=[command(ctx.config, ctx.db)],
        about=about,
    )


def _teller(ctx: Context) -> Callable[[str, str, str], Awaitable[None]]:
    """Tells the owner a skill is held back, through the one send path: once per skill and
    content, so neither a restart nor a second use of the same files tells twice."""
    from agentd.access import owners
    from agentd.chat.markup import literal
    from agentd.chat.notice import post_notice

    owner = owners.resolve(ctx.config.access).owner_id

    async def tell(name: str, content: str, why: str) -> None:
        if owner is None:
            return  # `agentd doctor` and `agentd skills ls` still say it
        digest = hashlib.sha256(content.encode()).hexdigest()[:16]
        text = (
            f"⚠️ The skill {literal(name)} is held back: {why}. I won't use it until you check its "
            f"files and run `agentd skills enable {name}` on the server."
        )
        instance = f"skill-held-{name}-{digest}"
        await post_notice(ctx.engine.start, instance, None, text, user_id=owner)

    return tell


def _doctor(config: Config, probe: Probe) -> list[Check]:
    """Skills that are invalid or changed are named with the reason; the rest are counted."""
    from agentd.skills.catalog import scan_config
    from agentd.skills.overview import overview
    from agentd.skills.store import records

    def recorded(conn: Any) -> dict[str, Any]:
        try:
            return records(conn)
        except Exception:  # a database from before skills: nothing recorded yet
            return {}

    results = Checks()
    states = overview(scan_config(config), probe.read(recorded) or {})
    enabled = sum(s.state == "enabled" for s in states)
    where = ", ".join(map(str, config.skill_dirs))
    results.add("skills", True, f"{enabled} enabled of {len(states)} in {where}")
    problem = _install_folder_problem(config.skill_dirs[0])
    if problem:
        results.add("skills folder", True, problem, warn=True)
    for s in states:
        if s.state == "invalid":
            results.add(f"skill {s.name}", False, f"{s.path} is not a usable skill: {s.reason}")
        elif s.state in ("changed", "missing"):
            results.add(
                f"skill {s.name}",
                True,
                f"held back: {s.reason}; check it, then run `agentd skills enable {s.name}`",
                warn=True,
            )
    return results


def _install_folder_problem(folder: Path) -> str | None:
    """Why `agentd skills add` could not install into `folder` as this user, and the fix."""
    import os

    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or os.access(existing, os.W_OK):
        return None
    return (
        f"`agentd skills add` cannot write {folder} as this user (read-only here, as /etc is "
        "under the service's ProtectSystem=strict): install as root, or set [skills] paths = "
        '["/var/lib/agentd/skills"] (the service may write there) and run `agentd skills add` '
        "again"
    )


def capability() -> Simple:
    return Simple("skills", build=_build, doctor=_doctor)
