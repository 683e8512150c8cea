"""The `agentd` command (R-CLI-1). A subcommand's module is imported only when it runs.

`agentd history` must start in a fraction of the daemon's import time, so the group knows its
subcommands by name and import path and loads the one invoked; help loads them all.
"""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_group
from typer.models import CommandInfo

from agentd import __version__
from agentd.runtime.gc_pause import paused

# Name -> "module:attribute", in the order help lists them. The attribute is a command
# function, or a Typer app for a command group.
COMMANDS: dict[str, str] = {
    "init": "agentd.cli.init:init",
    "run": "agentd.cli.run:run",
    "history": "agentd.cli.history:history",
    "pending": "agentd.cli.approvals:pending",
    "approve": "agentd.cli.approvals:approve",
    "deny": "agentd.cli.approvals:deny",
    "audit": "agentd.cli.audit:audit",
    "usage": "agentd.cli.ops:usage",
    "backup": "agentd.cli.ops:backup",
    "prune": "agentd.cli.prune:prune",
    "pair": "agentd.cli.users:pair",
    "users": "agentd.cli.users:app",
    "doctor": "agentd.cli.ops:doctor",
    "models": "agentd.cli.models:models",
    "workflows": "agentd.cli.workflows:app",
    "automations": "agentd.cli.automations:app",
    "memory": "agentd.cli.memory:app",
    "schedule": "agentd.cli.schedule:app",
    "tasks": "agentd.cli.tasks:app",
    "watch": "agentd.cli.watch:app",
    "briefing": "agentd.cli.briefing:app",
    "ingest": "agentd.cli.docs:ingest",
    "docs": "agentd.cli.docs:app",
    "rules": "agentd.cli.rules:app",
    "browser": "agentd.cli.browser:app",
    "skills": "agentd.cli.skills:app",
    "mcp": "agentd.cli.mcp:app",
    "dashboard": "agentd.cli.dashboard:dashboard",
}


def _no_type_on_flags() -> None:
    """typer 0.29 shows `<bool>` beside plain flags (`--json <bool>`), as if they took a value;
    a flag takes none, so its type column stays empty. Other typer versions: untouched."""
    from typer.core import TyperOption

    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "_agentd_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        if self.is_flag and self.metavar is None:
            return None
        return original(self, ctx)  # type: ignore[no-any-return]

    display_type_rich._agentd_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_no_type_on_flags()


class LazyGroup(TyperGroup):
    """A Typer group that builds a subcommand from `COMMANDS` the first time it is asked for."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [*COMMANDS, *(n for n in super().list_commands(ctx) if n not in COMMANDS)]

    def get_command(self, ctx: typer.Context, cmd_name: str) -> typer.core.click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            self.commands[cmd_name] = load_command(cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx, args):  # type: ignore[no-untyped-def]
        if args and args[0] not in COMMANDS:
            # A typo: load every command so the "did you mean" suggestions know them all.
            for name in self.list_commands(ctx):
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


def load_command(name: str) -> typer.core.click.Command:
    """Import the module behind `name` and build its click command."""
    module, attribute = COMMANDS[name].split(":")
    with paused():
        target = getattr(importlib.import_module(module), attribute)
    if isinstance(target, typer.Typer):
        command: typer.core.click.Command = get_group(target)
    else:
        command = get_command_from_info(
            CommandInfo(name=name, callback=target),
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        )
    command.name = name
    _one_line_summaries(command)
    return command


def _one_line_summaries(command: typer.core.click.Command) -> None:
    """In a group's list of commands, typer's rich help keeps the line breaks of a docstring's
    first paragraph, so a summary wrapped in the source came out broken mid-sentence at any
    width; the summary is that paragraph on one line, wrapped by the terminal."""
    if command.short_help is None and command.help:
        first = inspect.cleandoc(command.help).split("\n\n")[0]
        command.short_help = " ".join(first.split())
    for sub in getattr(command, "commands", {}).values():
        _one_line_summaries(sub)


app = typer.Typer(
    name="agentd",
    cls=LazyGroup,
    help="A personal AI agent on your own server, talked to over Telegram, Matrix or the web.",
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
    """A personal AI agent on your own server, talked to over Telegram, Matrix or the web."""
    from agentd.cli.common import err, out

    out.reset()  # each command prints at the width of the terminal it runs in
    err.reset()
    if config is not None:
        if not config.expanduser().is_file():
            from agentd.cli.common import EXIT_CONFIG, fail

            fail(
                f"config file {config} does not exist; pass an existing --config PATH", EXIT_CONFIG
            )
        # The documented lookup already honours $AGENTD_CONFIG; a subcommand's own --config wins.
        os.environ["AGENTD_CONFIG"] = str(config)


@app.command("version")
def version() -> None:
    """Print the agentd version."""
    typer.echo(f"agentd {__version__}")


def command_names() -> list[str]:
    """Every top-level command, as `agentd --help` lists them."""
    return [*COMMANDS, *(c.name for c in app.registered_commands if c.name not in COMMANDS)]


def main() -> None:
    app()
