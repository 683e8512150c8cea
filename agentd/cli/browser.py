"""`agentd browser`: the browser's profiles the owner keeps for sites (list, sign in, remove)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from agentd.cli.common import ConfigOption, JsonOption, config_or_exit, fail, iso, out, print_json

app = typer.Typer(help="The browser's saved profiles: list, sign in, remove.", no_args_is_help=True)
profiles_app = typer.Typer(help="Profiles the owner keeps for a site.", invoke_without_command=True)
app.add_typer(profiles_app, name="profiles")


@profiles_app.callback()
def profiles_ls(ctx: typer.Context, json: JsonOption = False, config: ConfigOption = None) -> None:
    """List saved profiles: name, site, number of cookies, when saved (never their values)."""
    if ctx.invoked_subcommand is not None:
        return
    from agentd.browser import profiles

    cfg = config_or_exit(config)
    found = profiles.listing(cfg.db_path.parent)
    if json:
        print_json([p.model_dump() for p in found])
        return
    if not found:
        out.print("No browser profiles: every task gets a fresh one, deleted afterwards.")
        return
    for p in found:
        out.print(f"{p.name}  {p.site}  {p.cookies} cookies  saved {iso(p.saved_at)}", markup=False)


@profiles_app.command("rm")
def profiles_rm(
    name: Annotated[str, typer.Argument(help="The profile's name")], config: ConfigOption = None
) -> None:
    """Remove a saved profile (its cookies and local storage) for good."""
    from agentd.browser import profiles

    cfg = config_or_exit(config)
    try:
        removed = profiles.remove(cfg.db_path.parent, name)
    except profiles.ProfileError as exc:
        fail(str(exc))
    if not removed:
        fail(f"there is no browser profile {name!r} (`agentd browser profiles` lists them)")
    out.print(f"Removed the browser profile {name}.")


@app.command("login")
def login(
    name: Annotated[str, typer.Argument(help="The profile's name, e.g. shop")],
    url: Annotated[str, typer.Argument(help="The site's sign-in page")],
    config: ConfigOption = None,
) -> None:
    """Sign in to a site yourself and keep the session as profile NAME (passwords hidden)."""
    from agentd.browser.login import login as sign_in
    from agentd.browser.profiles import ProfileError
    from agentd.browser.service import BrowserError
    from agentd.daemon.startup import set_up_logging

    cfg = config_or_exit(config)
    # What the browser logs or fails with may quote the site's session: through this
    # process's redactor, which the profile teaches as the daemon's turns teach the daemon's.
    redactor = set_up_logging(cfg, level="WARNING")

    def ask(label: str, hidden: bool) -> str:
        return str(typer.prompt(label, default="", hide_input=hidden, show_default=False))

    try:
        made = asyncio.run(sign_in(cfg, name, url, ask, redactor.learn))
    except (BrowserError, ProfileError) as exc:
        fail(redactor(str(exc)))
    out.print(f"Saved the browser profile {made.name} for {made.site} ({made.cookies} cookies).")
