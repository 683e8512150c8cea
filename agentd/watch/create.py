"""Adding a watch from structured fields (the `watch_add` tool and `agentd watch add` share
this), and the lines that describe one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agentd.chat.inputs import ChatKind
from agentd.config import Config
from agentd.config.models import ModelSettings
from agentd.ledger import audit
from agentd.ledger.pricing import ModelPrice, price_for
from agentd.llm.pricing import cheapest, price_table
from agentd.schedule import ScheduleError, When
from agentd.schedule.create import local_iso
from agentd.schedule.recurrence import Recurrence
from agentd.schedule.timing import Gap, checked, checked_bounded
from agentd.watch import budget, store
from agentd.watch.model import Source
from agentd.watch.store import CatchUp, Watch

FIRST_CHECK_AFTER = 2  # seconds: the first read comes at once, so a wrong source shows soon


class WatchRequest(BaseModel):
    """What to check, how often, and when to speak: the tool's and the CLI's arguments."""

    label: str = Field(min_length=1, max_length=200, description="What is watched, in a few words.")
    condition: str = Field(
        min_length=1,
        max_length=1000,
        description="When to tell the owner, in their words, e.g. 'only if something new and "
        "important arrived'.",
    )
    source: Source
    every: str | None = Field(
        default=None, description="Check at this interval: '15m', '1h', '1d'."
    )
    rrule: str | None = Field(
        default=None,
        description="Or on a calendar rule (RFC 5545), e.g. 'FREQ=DAILY;BYHOUR=8;BYMINUTE=0'.",
    )
    daily_tokens: int | None = Field(
        default=None, ge=0, description="Token cap per day; default: the owner's setting."
    )
    catch_up: CatchUp | None = None


def _source_known(conn: Any, source: Source, config: Config) -> None:
    """Refuse a source the config does not have (a mail account, a calendar, an automation):
    the watch would fail at every check. Only what the config and the database say: no
    login, no loading of the owner's code."""
    from agentd.watch.sources import find_account

    try:
        if source.kind == "mail":
            find_account(config.mail, source.account, "mail account")
        elif source.kind == "calendar":
            find_account(config.calendar, source.account, "calendar")
    except LookupError as exc:
        raise ScheduleError(str(exc)) from None
    if source.kind == "automation":
        _automation_known(conn, source.automation, config)


def _loaded_automations(conn: Any) -> set[str] | None:
    """What the daemon that ran last loaded; None when none has said yet. Read from the table
    the automations package rewrites at each start and reload (a row named "" says it has
    said), as the automation source reads its runs: watches sit beside automations, not above."""
    rows = conn.execute("SELECT automation FROM automation_loaded").fetchall()
    return {name for (name,) in rows if name} if rows else None


def _automation_known(conn: Any, name: str, config: Config) -> None:
    if not config.automations.folder and not config.automations.modules:
        raise ScheduleError(
            "no automations are configured; write them in the folder that [automations] "
            "folder names in the config (docs/workflows.md)"
        )
    loaded = _loaded_automations(conn)
    if loaded is not None and name not in loaded:
        names = ", ".join(sorted(loaded)) or "none"
        raise ScheduleError(
            f"the daemon has loaded no automation named {name!r} (loaded: {names}); "
            "`agentd automations ls` lists the folder's, `agentd automations reload` loads "
            "a new one"
        )


def _gap(config: Config) -> Gap:
    return Gap(config.watch.min_interval, "checks", "watch.min_interval")


def _when(req: WatchRequest) -> When:
    if bool(req.every) == bool(req.rrule):
        raise ScheduleError("give exactly one of: every (an interval) or rrule (a calendar rule)")
    return When(every=req.every, rrule=req.rrule)


def timing(req: WatchRequest, *, now: float, config: Config) -> Recurrence:
    """When the watch checks, checked, in this process (as a schedule's `timing`)."""
    return checked(_when(req), config.agent.timezone, now, _gap(config))


async def timing_bounded(req: WatchRequest, *, now: float, config: Config) -> Recurrence:
    """`timing` with a calendar rule searched in a child with a CPU budget."""
    return await checked_bounded(_when(req), config.agent.timezone, now, _gap(config))


def create(
    conn: Any,
    req: WatchRequest,
    rec: Recurrence,
    *,
    watch_id: str,
    user_id: int,
    chat_id: int,
    chat_kind: ChatKind,
    now: float,
    config: Config,
    by: str,
) -> tuple[Watch, bool]:
    """Validate and store a watch whose `timing` was checked, with its first check (in a
    moment); (watch, newly made)."""
    found = store.get_any(conn, watch_id)
    if found is not None:
        return found, False  # the same tool call, run again
    if chat_kind != "private" and req.source.kind != "page":
        raise ScheduleError(
            f"a {req.source.kind} watch reads the owner's own data: it tells only a private "
            "chat (a page watch may tell a group)"
        )
    _source_known(conn, req.source, config)
    active = store.count_active(conn, user_id)
    if active >= config.watch.max_per_user:
        raise ScheduleError(
            f"there are already {active} watches (the limit is {config.watch.max_per_user}, "
            "watch.max_per_user); remove one first"
        )
    w = Watch(
        id=watch_id,
        user_id=user_id,
        chat_id=chat_id,
        chat_kind=chat_kind,
        label=req.label.strip(),
        source=req.source,
        condition=req.condition.strip(),
        recurrence=rec,
        catch_up=req.catch_up or config.watch.catch_up,
        daily_tokens=req.daily_tokens,
        state="active",
        next_run=None,
        seen=None,
        fail_streak=0,
        failing_told=False,
        capped_day=None,
        created_at=now,
        updated_at=now,
        created_by=by,
    )
    store.insert(conn, w)
    store.start_occurrence(conn, w, int(now) + FIRST_CHECK_AFTER, now)
    audit.record(
        conn,
        "watch_created",
        chat_id=chat_id,
        user_id=user_id,
        detail={"watch": watch_id, "source": req.source.kind, "by": by},
        at=now,
    )
    return store.get(conn, watch_id), True


def model_price(config: Config) -> tuple[str, ModelPrice]:
    """The model that decides for watches (`[llm.models] watch`, else the cheapest) and its
    price per million tokens."""
    name = config.llm.models.get("watch") or cheapest(config.llm)
    label = ModelSettings.of(config.llm).ref(name).label
    return label, price_for(label, price_table(config.llm))


def summary(w: Watch) -> str:
    """One line: id, label, source, when, condition, state."""
    state = "" if w.state == "active" else f" [{w.state}]"
    if w.capped_day and w.state == "active":
        state = f" [paused by a cap on {w.capped_day}]"
    return (
        f"{w.id}: {w.label} — {w.source.describe()}, {w.recurrence.describe()}; tells you "
        f"only if {w.condition}{state}"
    )


def report(conn: Any, config: Config, w: Watch, now: float) -> str:
    """What /watches and `agentd watch ls` say of one watch: the line, the counts, the cost."""
    label, price = model_price(config)
    fc = budget.forecast(conn, config, w, price, now)
    s = store.stats(conn, w.id)
    counts = (
        f"{s.checks} check{'' if s.checks == 1 else 's'}: {s.unchanged} unchanged, "
        f"{s.quiet} quiet, {s.told} told, {s.failed} failed, {s.capped} capped; {s.tokens:,} tokens"
    )
    nxt = f"next {local_iso(w.next_run, w.recurrence.timezone)}" if w.next_run else "not running"
    return f"{summary(w)}\n  {counts}; {nxt}\n  cost ({label}): {fc.describe()}"
