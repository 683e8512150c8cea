"""The pages: each handler reads through queries.py (or changes through actions.py) and
renders one template. Routes are listed in `add_routes`."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import jinja2
from aiohttp import web

from agentd.dashboard import actions, auth, queries, signin, spend
from agentd.dashboard.server import SESSION, flash_url, render, site_of


def _iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M")


def _usd(value: float) -> str:
    return f"${value:.4f}" if value < 1 else f"${value:.2f}"


def add_filters(env: jinja2.Environment) -> None:
    env.filters["when"] = _iso
    env.filters["usd"] = _usd
    env.filters["pct"] = lambda v: f"{v:.0%}"
    env.filters["num"] = lambda v: f"{v:,}"


async def login_page(request: web.Request) -> web.Response:
    return render(request, "login.html", token=request.query.get("t", "")[:100])


async def login(request: web.Request) -> web.Response:
    """Redeem a one-time token (a POST, so a link preview fetching the URL cannot use it)."""
    site = site_of(request)
    token = str((await request.post()).get("t", ""))[:100]
    session = await site.access.write(auth.redeem, token, site.config.session_hours)
    if session is None:
        return render(request, "login.html", token="", failed=True)
    site.learn([session])  # before anything could write it: the cookie signs in as the owner
    response = web.HTTPSeeOther("/")
    response.set_cookie(
        auth.cookie_name(site.config.secure),
        session,
        max_age=int(site.config.session_hours * 3600),
        path="/",
        httponly=True,
        samesite="Strict",
        secure=site.config.secure,
    )
    raise response


async def logout(request: web.Request) -> web.Response:
    site = site_of(request)
    await site.access.write(auth.end_session, request[SESSION])
    response = web.HTTPSeeOther("/login")
    # As it was set: a browser ignores a __Host- cookie's deletion that lacks Secure.
    response.del_cookie(
        auth.cookie_name(site.config.secure),
        path="/",
        secure=site.config.secure,
        httponly=True,
        samesite="Strict",
    )
    raise response


async def now(request: web.Request) -> web.Response:
    site = site_of(request)
    data = await site.access.read(
        queries.now_page, time.time(), site.prices, site.daily_tokens, site.schema
    )
    return render(request, "now.html", **data)


async def conversations(request: web.Request) -> web.Response:
    site = site_of(request)
    found = await site.access.read(queries.chats)
    chat = request.match_info.get("chat")
    shown: dict[str, Any] = {"messages": [], "edited": set()}
    if chat is not None:
        shown = await site.access.read(queries.conversation, _int(chat))
    return render(
        request, "conversations.html", chats=found, most=queries.CHATS_SHOWN, chat=chat, **shown
    )


async def turn(request: web.Request) -> web.Response:
    data = await site_of(request).access.read(queries.timeline, request.match_info["id"])
    if data is None:
        raise web.HTTPNotFound(text="No such turn.")
    return render(request, "turn.html", **data)


async def approvals_page(request: web.Request) -> web.Response:
    data = await site_of(request).access.read(queries.approvals_page, time.time())
    return render(request, "approvals.html", **data)


async def cost(request: web.Request) -> web.Response:
    site = site_of(request)
    days = min(max(_filter_int(request, "days", 30, "days"), 1), 400)
    now = time.time()
    # A write only on the first view after a day is over: every other view just reads.
    if await site.access.read(spend.rolled_until) < spend.finished(now):
        await site.access.write(spend.roll_up, now)
    since = now - days * queries.DAY
    groups = await site.access.read(spend.groups, since, site.prices)
    vision = await site.access.read(spend.vision_cache, since)
    return render(
        request, "cost.html", days=days, groups=groups, budget=site.daily_tokens, vision=vision
    )


async def memory(request: web.Request) -> web.Response:
    q = request.query.get("q", "")[:200]
    found = await site_of(request).access.read(queries.memories, q)
    return render(request, "memory.html", q=q, memories=found)


async def memory_one(request: web.Request) -> web.Response:
    site = site_of(request)
    memory_id = _int(request.match_info["id"])
    data = await site.access.read(queries.memory_history, memory_id)
    if data is None:
        raise web.HTTPNotFound(text="No such memory.")
    return render(request, "memory_one.html", can_embed=site.embedder is not None, **data)


async def memory_export(request: web.Request) -> web.Response:
    from agentd.memory.store import list_memories

    found = await site_of(request).access.read(list_memories, None, limit=1_000_000)
    # Off the event loop: a big memory makes a big file, and the chats keep being answered.
    body = await asyncio.to_thread(_export_json, found)
    return web.Response(
        text=body,
        content_type="application/json",
        headers={"Content-Disposition": 'attachment; filename="memories.json"'},
    )


def _export_json(found: list[Any]) -> str:
    # "<" escaped: the export is never HTML, whatever a browser guesses.
    body = json.dumps([m.model_dump() for m in found], ensure_ascii=False, indent=1)
    return body.replace("<", "\\u003c")


async def schedules(request: web.Request) -> web.Response:
    site = site_of(request)
    found = await site.access.read(queries.schedules)
    runs = await site.access.read(queries.automation_runs)
    watched = await site.access.read(queries.watches, site.prices)
    return render(request, "schedules.html", schedules=found, runs=runs, watches=watched)


async def skills(request: web.Request) -> web.Response:
    site = site_of(request)
    found = await site.access.read(queries.skills)
    return render(request, "skills.html", skills=found, accounts=site.accounts)


async def audit(request: web.Request) -> web.Response:
    kind = request.query.get("kind", "")[:60]
    hours = _filter_int(request, "hours", 0, "since (hours)")
    since = time.time() - hours * 3600 if hours > 0 else None
    chat_text = request.query.get("chat", "").strip()
    chat = _filter_int(request, "chat", 0, "chat id") if chat_text else None
    data = await site_of(request).access.read(queries.audit, kind, since, chat)
    return render(request, "audit.html", kind=kind, hours=hours, chat=chat_text, **data)


# SQLite's INTEGER: a larger number can name no row, and binding it raises OverflowError.
_ROW_ID = range(-(2**63), 2**63)


def _number(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value in _ROW_ID else None


def _int(text: str) -> int:
    """An id from the path: anything that is not one names nothing here."""
    value = _number(text)
    if value is None:
        raise web.HTTPNotFound(text="Not found.")
    return value


def _filter_int(request: web.Request, name: str, default: int, label: str) -> int:
    """A number typed into a page's filter: empty is the default; anything else that is not a
    whole number is said, so the owner can correct it (not a bare "Not found")."""
    text = request.query.get(name, "").strip()
    if not text:
        return default
    value = _number(text)
    if value is None:
        raise web.HTTPBadRequest(
            text=f"The {label} filter takes a whole number; go back and correct it."
        )
    return value


async def _change(
    request: web.Request,
    fn: Any,
    *args: Any,
    back: str,
    then: Callable[[], None] | None = None,
) -> web.Response:
    """Run one change in one transaction (and `then`, once it is committed); come back to
    `back` saying what happened."""
    try:
        said = await site_of(request).access.write(fn, *args)
    except actions.Refused as exc:
        said = str(exc)
    else:
        if then is not None:
            then()
    raise web.HTTPSeeOther(flash_url(request, back, said))


async def decide(request: web.Request) -> web.Response:
    form = await request.post()
    decision = form.get("decision")
    approval_id = request.match_info["id"]
    if decision == "always":
        return await _change(request, actions.approve_always, approval_id, back="/approvals")
    reason = str(form.get("reason", ""))[:500]
    approve = decision == "approve"
    return await _change(request, actions.decide, approval_id, approve, reason, back="/approvals")


async def rule_rm(request: web.Request) -> web.Response:
    rule = _int(request.match_info["id"])
    return await _change(request, actions.remove_rule, rule, back="/approvals")


async def forget(request: web.Request) -> web.Response:
    memory_id = _int(request.match_info["id"])
    return await _change(request, actions.forget_memory, memory_id, back="/memory")


async def memory_pin(request: web.Request) -> web.Response:
    memory_id = _int(request.match_info["id"])
    on = (await request.post()).get("on") == "1"
    back = f"/memory/{memory_id}"
    return await _change(request, actions.pin_memory, memory_id, on, back=back)


async def memory_embedding_change(request: web.Request) -> web.Response:
    """Edit or restore: both re-embed, so both need the daemon's embedder."""
    site = site_of(request)
    memory_id = _int(request.match_info["id"])
    form = await request.post()
    back = f"/memory/{memory_id}"
    if site.embedder is None:
        said = NO_EMBEDDER
    else:
        try:
            if request.match_info["op"] == "edit":
                text = str(form.get("text", ""))
                said = await actions.edit_memory(site.access, site.embedder, memory_id, text)
            else:
                version = _int(str(form.get("version", "")))
                said = await actions.restore_memory(site.access, site.embedder, memory_id, version)
        except actions.Refused as exc:
            said = str(exc)
    raise web.HTTPSeeOther(flash_url(request, back, said))


NO_EMBEDDER = (
    "Editing or restoring a memory re-embeds it, which this dashboard cannot do on its own: "
    "use `agentd memory edit` / `agentd memory restore`, or the dashboard the daemon serves."
)


async def schedule_state(request: web.Request) -> web.Response:
    states = {"pause": "paused", "resume": "active", "cancel": "cancelled"}
    state = states.get(request.match_info["op"])
    if state is None:
        raise web.HTTPNotFound(text="Not found.")
    sid = request.match_info["id"]
    return await _change(request, actions.set_schedule, sid, state, back="/schedules")


async def watch_state(request: web.Request) -> web.Response:
    states = {"pause": "paused", "resume": "active", "remove": "removed"}
    state = states.get(request.match_info["op"])
    if state is None:
        raise web.HTTPNotFound(text="Not found.")
    wid = request.match_info["id"]
    return await _change(request, actions.set_watch, wid, state, back="/schedules")


async def workflow_op(request: web.Request) -> web.Response:
    ops = {"retry": actions.retry, "cancel": actions.cancel}
    op = ops.get(request.match_info["op"])
    if op is None:
        raise web.HTTPNotFound(text="Not found.")
    iid = request.match_info["id"]
    if op is actions.cancel:
        access = site_of(request).access
        return await _change(request, op, iid, back="/", then=partial(access.stop_flagged, iid))
    return await _change(request, op, iid, back="/")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/login", login_page)
    router.add_post("/login", login)
    router.add_post("/logout", logout)
    router.add_get("/", now)
    router.add_get("/conversations", conversations)
    router.add_get("/conversations/{chat}", conversations)
    router.add_get("/turn/{id}", turn)
    router.add_get("/approvals", approvals_page)
    router.add_post("/approvals/{id}", decide)
    router.add_post("/rules/{id}/remove", rule_rm)
    router.add_get("/cost", cost)
    router.add_get("/memory", memory)
    router.add_get("/memory/export", memory_export)
    router.add_get("/memory/{id:\\d+}", memory_one)
    router.add_post("/memory/{id}/forget", forget)
    router.add_post("/memory/{id}/pin", memory_pin)
    router.add_post("/memory/{id}/{op:edit|restore}", memory_embedding_change)
    router.add_get("/schedules", schedules)
    router.add_post("/schedules/{id}/{op}", schedule_state)
    router.add_post("/watches/{id}/{op}", watch_state)
    router.add_post("/workflows/{id}/{op}", workflow_op)
    router.add_get("/skills", skills)
    router.add_get("/audit", audit)
    signin.add_routes(router)
