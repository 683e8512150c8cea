"""`agentd dashboard`: the owner's web dashboard, on loopback, with a one-time login link."""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentd.cli.common import (
    ConfigOption,
    config_or_exit,
    database,
    err,
    fail,
    out,
    transaction,
)

if TYPE_CHECKING:
    from agentd.dashboard.links import Learn


def _settings(cfg: Any, **given: Any) -> Any:
    """`[dashboard]` from the config, overridden by the options given."""
    from agentd.dashboard.config import DashboardConfig

    base = cfg.dashboard
    changes = {k: v for k, v in given.items() if v is not None}
    try:
        return DashboardConfig.model_validate({**base.model_dump(), **changes})
    except ValueError as exc:
        fail(f"invalid dashboard settings: {exc}")


def new_link(cfg: Any, settings: Any, port: int, learn: Learn) -> str:
    """A one-time login link (its token is stored hashed, with an expiry, and taught to the
    process's redactor through `learn`)."""
    from agentd.dashboard.links import login_link

    with database(cfg, write=True) as conn:  # applies the migrations, the dashboard's too
        with transaction(conn):
            return login_link(conn, settings, f"cli:{getpass.getuser()}", port, learn=learn)


def _logs_nothing(tokens: Iterable[str]) -> None:
    """`--link` prints the link and ends: no log is set up, so there is nothing to teach."""


def dashboard(
    host: Annotated[str | None, typer.Option(help="Address to listen on (loopback).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (0: any free one).")] = None,
    public_url: Annotated[
        str | None, typer.Option(help="The https URL a reverse proxy serves it at.")
    ] = None,
    allow_remote: Annotated[
        bool | None, typer.Option("--allow-remote", help="Listen beyond loopback (see docs).")
    ] = None,
    link: Annotated[
        bool, typer.Option("--link", help="Only print a new login link for a running dashboard.")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Serve the web dashboard and print a one-time login link."""
    from agentd.dashboard.config import BindRefused, check_bind

    cfg = config_or_exit(config)
    settings = _settings(
        cfg, host=host, port=port, public_url=public_url, allow_remote=allow_remote
    )
    try:
        check_bind(settings)
    except BindRefused as exc:
        fail(str(exc))
    if link:
        made = new_link(cfg, settings, settings.port, _logs_nothing)
        out.print(made, highlight=False, soft_wrap=True)
        if not settings.enabled:
            _say_daemon_does_not_serve(settings.port)
        return
    try:
        asyncio.run(_serve(cfg, settings))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        hint = "try another --port"
        if settings.enabled:  # most likely the daemon itself, serving the same settings
            hint = "`agentd run` serves it already ([dashboard] enabled): `agentd dashboard --link`"
        fail(f"cannot listen on {settings.host}:{settings.port}: {exc}; {hint}")


def _say_daemon_does_not_serve(port: int) -> None:
    """The link leads somewhere only if a dashboard listens: with the config's dashboard off,
    only an `agentd dashboard` left running serves it (no port is probed to find out)."""
    err.print(
        f"The dashboard is off in the config ([dashboard] enabled = false): this link works "
        f"only while `agentd dashboard` runs on port {port}. To have `agentd run` serve it, "
        "set enabled = true under [dashboard] and restart the daemon.",
        markup=False,
        highlight=False,
    )


async def _serve(cfg: Any, settings: Any) -> None:
    import shutil
    import tempfile
    from pathlib import Path

    from agentd.browser.capability import signin_desk
    from agentd.channels import migrations
    from agentd.daemon.startup import set_up_logging
    from agentd.dashboard.access import FileAccess
    from agentd.dashboard.site import site_for

    redactor = set_up_logging(cfg)
    # A browser of its own for "Sign in to a site" (the daemon's is in another process),
    # started only when a sign-in starts.
    run_dir = Path(tempfile.mkdtemp(prefix="agentd-signin-"))
    desk, why = signin_desk(cfg, run_dir, redactor.learn)
    site = site_for(
        cfg, settings, FileAccess(cfg.db_path), signin=desk, signin_why=why, learn=redactor.learn
    )
    site.schema = migrations()  # channels' tables too: the Now page's schema check
    try:
        await _serve_site(site, cfg, settings, redactor.learn)
    finally:
        if desk is not None:
            await desk.close()
            await desk.service.close()
        shutil.rmtree(run_dir, ignore_errors=True)


async def _serve_site(site: Any, cfg: Any, settings: Any, learn: Learn) -> None:
    from agentd.dashboard.site import serve

    runner = await serve(site)
    port = runner.addresses[0][1] if runner.addresses else settings.port
    link = await asyncio.to_thread(new_link, cfg, settings, port, learn)
    # flush: a script or test reads the link from a pipe while the server keeps running.
    print(f"Dashboard on http://{settings.host}:{port}", flush=True)
    print(f"Sign in (once, within {settings.link_minutes:g} min): {link}", flush=True)
    print("Stop with Ctrl-C; `agentd dashboard --link` prints another link.", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    """`python -m agentd.cli.dashboard`: the same command before `agentd` lists it."""
    typer.run(dashboard)


if __name__ == "__main__":
    main()
