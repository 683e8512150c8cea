"""The `agentd` command (R-CLI-1). Subcommands import heavy stacks only when they run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from agentd import __version__
from agentd.cli import (
    approvals,
    audit,
    docs,
    history,
    init,
    memory,
    ops,
    prune,
    run,
    schedule,
    users,
    workflows,
)
from agentd.cli.common import EXIT_CONFIG, fail

app = typer.Typer(
    name="agentd",
    help="A personal AI agent on your own server, talked to over Telegram.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"agentd {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file for any subcommand (before or after it)."),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """A personal AI agent on your own server, talked to over Telegram."""
    if config is not None:
        if not config.expanduser().is_file():
            fail(
                f"config file {config} does not exist; pass an existing --config PATH", EXIT_CONFIG
            )
        # The documented lookup already honours $AGENTD_CONFIG; a subcommand's own --config wins.
        os.environ["AGENTD_CONFIG"] = str(config)


app.command("init")(init.init)
app.command("run")(run.run)
app.command("history")(history.history)
app.command("pending")(approvals.pending)
app.command("approve")(approvals.approve)
app.command("deny")(approvals.deny)
app.command("audit")(audit.audit)
app.command("usage")(ops.usage)
app.command("backup")(ops.backup)
app.command("prune")(prune.prune)
app.command("pair")(users.pair)
app.add_typer(users.app, name="users")
app.command("doctor")(ops.doctor)
app.add_typer(workflows.app, name="workflows")
app.add_typer(memory.app, name="memory")
app.add_typer(schedule.app, name="schedule")
app.command("ingest")(docs.ingest)
app.add_typer(docs.app, name="docs")


@app.command("version")
def version() -> None:
    """Print the agentd version."""
    typer.echo(f"agentd {__version__}")


def main() -> None:
    app()
