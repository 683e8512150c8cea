"""`agentd mcp`: read what each MCP server puts in front of the model, and trust it.

A server's tool descriptions and schemas go into every conversation as if the owner wrote them,
so the daemon offers a server's tools only after the owner has read exactly that text here
(`agentd mcp trust NAME`); when the server changes it, they are held back until trusted again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json as jsonlib
import logging
import time
from collections.abc import Iterator
from functools import partial
from typing import Annotated, Any

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    err,
    fail,
    iso,
    new_table,
    out,
    print_json,
    print_table,
    transaction,
)
from agentd.config import Config

app = typer.Typer(help="MCP servers: ls, trust.", no_args_is_help=True)
NameArg = Annotated[str, typer.Argument(help=r"The server's name in \[\[tools.mcp]].")]
YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Confirm without asking (for scripts).")
]


def _pins(cfg: Config) -> dict[str, Any]:
    from agentd.tools.mcp_pins import pins

    if not cfg.db_path.exists():
        return {}
    with database(cfg) as conn:
        try:
            return pins(conn)
        except Exception:  # a database from before MCP pins: nothing confirmed yet
            return {}


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """Every configured MCP server: trusted, changed (held back) or never trusted."""
    cfg = config_or_exit(config)
    pinned = _pins(cfg)
    rows = []
    for server in cfg.tools.mcp:
        pin = pinned.get(server.name)
        if pin is None:
            state = "not trusted"
        elif pin.seen_digest and pin.seen_digest != pin.digest:
            state = "changed"
        else:
            state = "trusted"
        rows.append(
            {
                "name": server.name,
                "state": state,
                "tools": len(pin.listing) if pin else 0,
                "hash": pin.digest if pin else "",
                "confirmed_at": iso(pin.confirmed_at) if pin else None,
            }
        )
    if json:
        print_json(rows)
        return
    table = new_table("name", "state", "tools", "hash", "confirmed")
    for r in rows:
        table.add_row(r["name"], r["state"], str(r["tools"]), r["hash"][:12], r["confirmed_at"])
    print_table(table, empty="No [[tools.mcp]] servers in the config.")


def _listing(cfg: Config, name: str) -> list[Any]:
    """Connect to the one server as the daemon would and read its tools."""
    from agentd.daemon.startup import process_redactor
    from agentd.tools.mcp import McpServers
    from agentd.tools.mcp_pins import listed

    server = next((s for s in cfg.tools.mcp if s.name == name), None)
    if server is None:
        fail(f"no [[tools.mcp]] server named {name!r}; see `agentd mcp ls`")
    redact = process_redactor(cfg)

    async def read() -> list[Any]:
        with _stderr_tail() as said:
            async with McpServers([server], redact=redact, environ=cfg.secret_source()) as mcp:
                if mcp.problems:
                    why = "; ".join(p.message for p in mcp.problems)
                    tail = "".join(f"\n  {line}" for line in said)
                    said_all = f"MCP server {name}: {why}" + (f"\nIt wrote:{tail}" if tail else "")
                    fail(redact(said_all))
                return listed(mcp.tools)

    return asyncio.run(read())


@contextlib.contextmanager
def _stderr_tail(lines: int = 10) -> Iterator[collections.deque[str]]:
    """The last lines a server wrote to its stderr, as the daemon logs them (the values it was
    handed redacted): what a server that failed to start said is the owner's best clue."""
    from agentd.tools.mcp import STDERR_PREFIX
    from agentd.tools.mcp import log as logger

    kept: collections.deque[str] = collections.deque(maxlen=lines)

    class Tail(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "mcp_server", None) is not None:
                kept.append(record.getMessage().removeprefix(STDERR_PREFIX))

    handler = Tail(logging.INFO)
    level = logger.level
    logger.setLevel(logging.INFO)  # the CLI sets up no logging: INFO would stop at the root
    logger.addHandler(handler)
    try:
        yield kept
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _shown(text: str) -> str:
    from agentd.cli.skills import _shown as shown

    return shown(text)


@app.command("trust")
def trust(name: NameArg, yes: YesOption = False, config: ConfigOption = None) -> None:
    """Show every tool a server offers, whole, and let the daemon offer exactly these."""
    from agentd.tools.mcp_pins import confirm, digest

    cfg = config_or_exit(config)
    listing = _listing(cfg, name)
    say = partial(err.print, highlight=False, soft_wrap=True, markup=True)
    say(
        f"[bold]MCP server {_shown(name)}[/]: {len(listing)} tool(s). The model reads this text "
        "in every conversation as if you wrote it: read it for instructions you did not mean."
    )
    for tool in listing:
        say(f"\n  [bold]{_shown(tool.name)}[/]: {_shown(tool.description)}")
        schema = jsonlib.dumps(tool.input_schema, ensure_ascii=False, indent=2)
        say("    " + _shown(schema).replace("\n", "\n    "))
    found = digest(listing)
    say(f"\n  hash: {found}")
    if not yes:
        import sys

        if not sys.stdin.isatty():
            fail("confirmation needed: run it in a terminal, or pass --yes")
        if not typer.confirm(f"Trust MCP server {name} with this text?", default=False, err=True):
            fail("nothing changed")
    with database(cfg, write=True) as conn, transaction(conn):
        confirm(conn, name, listing, time.time())
    out.print(
        f"Trusted MCP server {name} ({len(listing)} tools, hash {found[:12]}). Restart agentd "
        "to offer its tools.",
        highlight=False,
    )
