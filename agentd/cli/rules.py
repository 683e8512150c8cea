"""`agentd rules ls|rm`: the shell's "Always allow this" rules (hands/rules.py) and the hosts
a fetch may reach after outside content (tools/hostrules.py, ids `h<n>`)."""

from __future__ import annotations

from typing import Any

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    fail,
    iso,
    new_table,
    out,
    print_json,
    print_table,
    transaction,
)

app = typer.Typer(
    help="Shell commands and fetch hosts allowed without asking: list, remove.",
    no_args_is_help=True,
)


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """Every rule: the program, the pattern its arguments must match, who added it and when;
    then the hosts fetches may reach after outside content (ids h1, h2, …)."""
    from rich.text import Text

    from agentd.hands import rules
    from agentd.tools import hostrules

    cfg = config_or_exit(config)
    # The one way a command opens the database: it refuses another user's database as root.
    with database(cfg, write=True) as conn:
        found = rules.list_rules(conn)
        hosts = hostrules.list_rules(conn)
    if json:
        listed = [r.model_dump() for r in found]
        print_json(listed + [{**h.model_dump(), "id": f"h{h.id}", "kind": "host"} for h in hosts])
        return
    _print_hosts(hosts)
    allow = ", ".join(cfg.tools.shell.allowlist) or "(none)"
    out.print(
        f"Read-only allowlist ([tools.shell] allowlist): {allow}", markup=False, highlight=False
    )
    if not found:
        out.print("No always-allow rules: every other command asks.")
        return
    table = new_table("id", "program", "arguments pattern", "added by", "added (UTC)")
    for r in found:
        # Patterns are regular expressions: "[a-z]" must not be read as markup.
        cells = (str(r.id), r.program, r.args_pattern or "(none)", r.created_by, iso(r.created_at))
        table.add_row(*(Text(c or "") for c in cells))
    print_table(table)


def _print_hosts(hosts: list[Any]) -> None:
    if not hosts:
        out.print(
            "No allowed hosts: after outside content, a fetch of a URL you did not write asks."
        )
        return
    table = new_table("id", "host", "chat", "user", "added by", "added (UTC)")
    for h in hosts:
        table.add_row(
            f"h{h.id}", h.host, str(h.chat_id), str(h.user_id), h.created_by, iso(h.created_at)
        )
    print_table(table)


def _rm_host(rule_id: str, json: bool, config: Any) -> None:
    from agentd.tools import hostrules

    number = rule_id[1:]
    if not number.isdecimal():
        fail(f"{rule_id!r} is not a rule id; see `agentd rules ls`")
    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        removed = hostrules.remove_rule(conn, int(number), "cli")
    if removed is None:
        fail(f"there is no host rule {rule_id}; see `agentd rules ls`")
    if json:
        print_json({"removed": rule_id})
    else:
        out.print(f"Rule {rule_id} removed: fetches from {removed.host} ask again", highlight=False)


@app.command("rm")
def rm(rule_id: str, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Remove a rule (`3`, or `h2` for a host): matching calls ask again from the very next
    call (audited)."""
    from agentd.hands import rules

    if rule_id.lower().startswith("h"):
        _rm_host(rule_id.lower(), json, config)
        return
    if not rule_id.isdecimal():
        fail(f"{rule_id!r} is not a rule id; see `agentd rules ls`")
    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        removed = rules.remove_rule(conn, int(rule_id), "cli")
    if removed is None:
        fail(f"there is no rule {rule_id}; see `agentd rules ls`")
    if json:
        print_json({"removed": rule_id})
    else:
        out.print(
            f"Rule {rule_id} removed: {removed.program} {removed.args_pattern}",
            markup=False,
            highlight=False,
        )
