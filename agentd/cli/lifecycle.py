"""Pause, resume and remove for what the daemon runs on its own (schedules, watches): one
transaction that changes the state, then the thing as JSON or as its one-line summary."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, NamedTuple

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    out,
    print_json,
    transaction,
)
from agentd.config import Config


class StateChange(NamedTuple):
    """How one kind of thing changes state; apply fails (the command's exit) on a wrong id or
    state, inside the transaction, so nothing is changed."""

    apply: Callable[[Any, str, str], Any]  # (conn, id, state) -> the changed thing
    as_json: Callable[[Any, Config, Any], Any]  # (conn, cfg, thing) -> what --json prints
    as_text: Callable[[Any], str]  # the one-line summary


class StateCommand(NamedTuple):
    name: str  # the command, e.g. "pause"
    state: str  # the state it sets
    help: str


def change_state(kind: StateChange, item_id: str, state: str, json: bool, config: Any) -> None:
    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn:
        with transaction(conn):
            item = kind.apply(conn, item_id, state)
        shown = kind.as_json(conn, cfg, item) if json else None
    if json:
        print_json(shown)
    else:
        out.print(kind.as_text(item), highlight=False)


def add_state_commands(
    app: typer.Typer, kind: StateChange, metavar: str, commands: Sequence[StateCommand]
) -> None:
    """One command per state change, each `<command> ID [--json] [--config]`."""
    for c in commands:
        app.command(c.name, help=c.help)(_command(kind, c.state, metavar))


def _command(kind: StateChange, state: str, metavar: str) -> Callable[..., None]:
    def command(item_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
        change_state(kind, item_id, state, json, config)

    # Set as an object, not a string annotation: typer could not resolve the closure's metavar.
    command.__annotations__["item_id"] = Annotated[str, typer.Argument(metavar=metavar)]
    return command
