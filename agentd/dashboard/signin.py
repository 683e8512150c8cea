"""The Browser page: the owner's saved browser profiles (*Remove*) and "Sign in to a site",
which drives the sandboxed browser's sign-in desk (`agentd.browser.remote`).

The live page works without JavaScript: the page's picture is an image button, so a click
posts its coordinates; text and keys are forms. `signin.js`, where it runs, sends the same
posts without reloading (asking for JSON) and refreshes the picture. Every post passes the
dashboard's guard (session, same origin, CSRF token). What the owner types is handed to the
desk and dropped: no log line, no audit detail, no error message carries it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from agentd.browser import profiles
from agentd.browser.remote import Click, Pressed, SignInError, Typed
from agentd.dashboard.actions import BY
from agentd.dashboard.server import flash_url, render, site_of
from agentd.ledger import audit

PAGE = "/browser"
LIVE = "/browser/signin"


def _desk(request: web.Request) -> Any:
    return site_of(request).signin


def _record(conn: Any, outcome: str, name: str, site: str) -> None:
    detail = {"profile": name, "site": site, "outcome": outcome, "by": BY}
    audit.record(conn, "browser_profile", detail=detail)


async def browser_page(request: web.Request) -> web.Response:
    site = site_of(request)
    found = await asyncio.to_thread(profiles.listing, site.browser_data)
    desk = _desk(request)
    view = await desk.view() if desk is not None else None
    return render(
        request,
        "browser.html",
        profiles=found,
        open=view,
        why_not=site.signin_why if not desk else "",
    )


async def remove_profile(request: web.Request) -> web.Response:
    site = site_of(request)
    name = request.match_info["name"]
    try:
        removed = await asyncio.to_thread(profiles.remove, site.browser_data, name)
    except profiles.ProfileError as exc:
        raise web.HTTPSeeOther(flash_url(request, PAGE, str(exc))) from None
    if removed:
        await site.access.write(_record, "removed", name, "")
    said = f"Removed the browser profile {name}." if removed else f"There is no profile {name}."
    raise web.HTTPSeeOther(flash_url(request, PAGE, said))


async def start(request: web.Request) -> web.Response:
    desk = _desk(request)
    if desk is None:
        raise web.HTTPSeeOther(flash_url(request, PAGE, site_of(request).signin_why))
    form = await request.post()
    name = str(form.get("name", "")).strip()[:64]
    url = str(form.get("url", "")).strip()[:2100]
    try:
        view = await desk.start(name, url)
    except SignInError as exc:
        raise web.HTTPSeeOther(flash_url(request, PAGE, str(exc))) from None
    await site_of(request).access.write(_record, "started", view.name, view.site)
    raise web.HTTPSeeOther(LIVE)


async def live(request: web.Request) -> web.Response:
    desk = _desk(request)
    view = await desk.view() if desk is not None else None
    if view is None:
        raise web.HTTPSeeOther(flash_url(request, PAGE, "No sign-in is open."))
    return render(request, "signin.html", view=view, stamp=int(time.time() * 1000))


async def screen(request: web.Request) -> web.Response:
    desk = _desk(request)
    if desk is None or desk.current is None:
        raise web.HTTPNotFound(text="No sign-in is open.")
    try:
        data = await desk.picture()
    except SignInError as exc:
        raise web.HTTPConflict(text=str(exc)) from None
    return web.Response(body=data, content_type="image/jpeg")


async def state(request: web.Request) -> web.Response:
    desk = _desk(request)
    view = await desk.view() if desk is not None else None
    return web.json_response(view.model_dump() if view is not None else {"open": False})


async def send(request: web.Request) -> web.Response:
    """A click, text or a key for the page."""
    desk = _desk(request)
    form = await request.post()
    op = request.match_info["op"]
    said = ""
    try:
        if desk is None:
            raise SignInError("No sign-in is open.")
        if op == "click":
            await desk.click(Click(x=_num(form.get("at.x")), y=_num(form.get("at.y"))))
        elif op == "type":
            await desk.type_text(Typed(text=str(form.get("text", ""))))
        else:
            await desk.press(Pressed.model_validate({"key": str(form.get("key", ""))}))
    except ValidationError:
        said = _REFUSED[op]
    except SignInError as exc:
        said = str(exc)
    return _answer(request, said)


_REFUSED = {
    "click": "That click was outside the page's picture.",
    "type": "Type between 1 and 1000 characters at a time.",
    "key": "That key is not one the page offers.",
}


def _num(value: Any) -> int:
    try:
        return int(float(str(value)))
    except (ValueError, OverflowError):  # not a number; inf, 1e400
        return -1


def _answer(request: web.Request, said: str) -> web.Response:
    if request.headers.get("Accept") == "application/json":
        return web.json_response({"ok": not said, "said": said})
    if said:
        raise web.HTTPSeeOther(flash_url(request, LIVE, said))
    raise web.HTTPSeeOther(LIVE)


async def finish(request: web.Request) -> web.Response:
    desk = _desk(request)
    if desk is None:
        raise web.HTTPSeeOther(PAGE)
    site = site_of(request)
    if request.match_info["op"] == "done":
        try:
            made = await desk.done()
        except SignInError as exc:
            raise web.HTTPSeeOther(flash_url(request, PAGE, str(exc))) from None
        await site.access.write(_record, "saved", made.name, made.site)
        said = (
            f"Saved the browser profile {made.name} for {made.site} ({made.cookies} cookies); "
            f'a turn of yours uses it with profile "{made.name}".'
        )
    else:
        name = await desk.cancel()
        if name is not None:
            await site.access.write(_record, "discarded", name, "")
        said = "Cancelled: nothing was kept." if name else "No sign-in was open."
    raise web.HTTPSeeOther(flash_url(request, PAGE, said))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get(PAGE, browser_page)
    router.add_post("/browser/profiles/{name}/remove", remove_profile)
    router.add_post(LIVE, start)
    router.add_get(LIVE, live)
    router.add_get(f"{LIVE}/screen", screen)
    router.add_get(f"{LIVE}/state", state)
    router.add_post(f"{LIVE}/{{op:click|type|key}}", send)
    router.add_post(f"{LIVE}/{{op:done|cancel}}", finish)
