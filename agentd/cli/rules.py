"""`agentd rules ls|rm`: the shell's "Always allow this" rules (hands/rules.py)."""

from __future__ import annotations

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

app = typer.Typer(help="Shell commands allowed without asking: list, remove.", no_args_is_help=True)


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """Every rule: the program, the pattern its arguments must match, who added it and when."""
    from rich.text import Text

    from agentd.hands import rules

    cfg = config_or_exit(config)
    # The one way a command opens the database: it refuses another user's database as root.
    with database(cfg, write=True) as conn:
        found = rules.list_rules(conn)
    if json:
        print_json([r.model_dump() for r in found])
        return
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


@app.command("rm")
def rm(rule_id: int, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Remove a rule: matching commands ask again from the very next call (audited)."""
    from agentd.hands import rules

    cfg = config_or_exit(config)
    with database(cfg, write=True) as conn, transaction(conn):
        removed = rules.remove_rule(conn, rule_id, "cli")
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
