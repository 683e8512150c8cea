"""`agentd browser login NAME URL`: the owner signs in to a site in the sandboxed browser from
a terminal, and the session is kept as the profile NAME for that site. The owner types every
field (a password hidden) into the terminal; it goes straight into the page and is never
stored, logged or shown to the model: only the site's cookies and local storage are kept."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agentd.browser import actions, profiles
from agentd.browser.pages import Element, host_of
from agentd.browser.service import BrowserError, BrowserService, Paths
from agentd.config import Config

# (label, hidden) -> what the owner typed ("" leaves the field as it is).
Ask = Callable[[str, bool], str]


async def _all_open(ids: list[str]) -> set[str]:
    return set(ids)


async def login(
    config: Config, name: str, url: str, ask: Ask, learn: Callable[[list[str]], object]
) -> profiles.ProfileInfo:
    """Open `url`, ask the owner for each field of its form, submit, keep the profile (its
    values taught to `learn`, the process's redactor's)."""
    from agentd.hands.files import sandbox_ids

    host = host_of(url)
    if not host:
        raise BrowserError(f"{url!r} is not an http(s) URL")
    data = config.db_path.parent
    run_dir = Path(tempfile.mkdtemp(prefix="agentd-login-"))
    service = BrowserService(
        config.browser,
        Paths(data_dir=data, run_dir=run_dir),
        _all_open,
        learn=learn,
        run_as=sandbox_ids(config),
    )
    try:
        found = await service.open_session("login")
        snap = await actions.open_url(service, found, url)
        fields = [e for e in snap.elements if e.kind in ("input", "textarea")]
        if not fields:
            raise BrowserError(f"{url} shows no field to sign in with")
        last: Element = fields[-1]
        for field in fields:
            value = ask(field.text or field.name or field.ref, field.password)
            if value:
                target = await actions.element(service, found, field.ref)
                await target.locator.fill(value)
                last = field
        await actions.submit(service, found, last.ref)
        state = await service.storage_state(found)
        profiles.save(data, name, host, state, time.time())
    finally:
        await service.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    return next(p for p in profiles.listing(data) if p.name == name)
