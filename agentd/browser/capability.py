"""The browser capability: off unless `[browser] enabled`; Playwright is imported only when
the browser first starts, so an enabled browser nobody uses costs nothing."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentd.config import Config
from agentd.tools.capability import Check, Checks, Context, Contribution, Probe, Simple

log = logging.getLogger("agentd.browser")
_OPEN = ("queued", "running", "waiting", "sleeping")
# What the browser lends the dashboard (`Contribution.shares`): its sign-in desk.
SIGNIN_DESK = "browser_signin"


def _missing(config: Config) -> str | None:
    """What keeps the browser from starting here, or None."""
    browser = config.browser
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed: `pip install 'agentd[browser]'`"
    if not os.access(browser.executable, os.X_OK):
        return f"{browser.executable} is not there: `apt-get install chromium`"
    if browser.sandbox == "bwrap":
        for tool, package in (("bwrap", "bubblewrap"), ("pasta", "passt")):
            if shutil.which(tool) is None:
                return f"the browser's sandbox needs {tool}: `apt-get install {package}`"
    elif os.geteuid() == 0:
        return (
            'Chromium\'s own sandbox does not run as root: use [browser] sandbox = "bwrap" '
            "or run agentd as a user"
        )
    return None


def _open_instances(db: Any) -> Any:
    async def still_open(ids: list[str]) -> set[str]:
        def query(conn: Any) -> set[str]:
            marks = ",".join("?" * len(ids))
            rows = conn.execute(
                f"SELECT id FROM workflow_instances WHERE id IN ({marks}) "
                f"AND status IN ({','.join('?' * len(_OPEN))})",
                (*ids, *_OPEN),
            ).fetchall()
            return {row[0] for row in rows}

        return await db.read(query) if ids else set()

    return still_open


async def _build(ctx: Context) -> Contribution:
    if not ctx.config.browser.enabled:
        return Contribution()
    problem = _missing(ctx.config)
    if problem:
        return Contribution(problems=[f"browser: not offered: {problem}"])
    from agentd.access import owners
    from agentd.browser.remote import SignIns
    from agentd.browser.service import BrowserService, Paths
    from agentd.browser.tools import browser_tools
    from agentd.hands.files import Workspaces, sandbox_ids

    data = ctx.config.db_path.parent
    service = BrowserService(
        ctx.config.browser,
        Paths(data_dir=data, run_dir=data / "browser" / "run"),
        _open_instances(ctx.db),
        run_as=sandbox_ids(ctx.config),
        learn=ctx.redactor.learn,
    )
    ctx.stack.push_async_callback(service.close)
    desk = SignIns(service, data)
    ctx.stack.push_async_callback(desk.close)  # first: a sign-in open at shutdown is discarded
    owner = owners.resolve(ctx.config.access).owner_id
    return Contribution(
        tools=browser_tools(service, Workspaces.from_config(ctx.config), owner_id=owner),
        about="use web pages in a real browser (I ask before changing anything on a site)",
        shares={SIGNIN_DESK: desk},
    )


def signin_desk(
    config: Config, run_dir: Path, learn: Callable[[list[str]], object]
) -> tuple[Any, str]:
    """For `agentd dashboard` on its own: a sign-in desk over a browser service of its own
    (the same sandbox and proxy, its files in `run_dir`; the browser starts only when a
    sign-in does), or None and why not; `learn`: that process's redactor's. The caller
    closes the desk, then its service."""
    if not config.browser.enabled:
        return None, "the browser is off ([browser] enabled = false)"
    problem = _missing(config)
    if problem:
        return None, problem
    from agentd.browser.remote import SignIns
    from agentd.browser.service import BrowserService, Paths
    from agentd.hands.files import sandbox_ids

    async def no_turns(ids: list[str]) -> set[str]:
        return set()

    data = config.db_path.parent
    paths = Paths(data_dir=data, run_dir=run_dir)
    service = BrowserService(
        config.browser, paths, no_turns, learn=learn, run_as=sandbox_ids(config)
    )
    return SignIns(service, data), ""


def _doctor(config: Config, probe: Probe) -> list[Check]:
    results = Checks()
    if not config.browser.enabled:
        results.add("browser", True, "off ([browser] enabled = false)")
        return results
    problem = _missing(config)
    if problem is None and config.browser.sandbox == "bwrap":
        from agentd.browser.jail import probe
        from agentd.hands.files import sandbox_ids

        problem = probe(sandbox_ids(config))
    if problem:
        results.add("browser", True, f"not offered: {problem}", warn=True)
    else:
        how = (
            "bubblewrap, seccomp and a network namespace whose only way out is agentd's proxy"
            if config.browser.sandbox == "bwrap"
            else "Chromium's own sandbox; the network through agentd's proxy"
        )
        results.add("browser", True, f"Chromium {config.browser.executable} in {how}")
    return results


def capability() -> Simple:
    return Simple("browser", build=_build, doctor=_doctor)
