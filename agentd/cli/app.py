"""The `agentd` command (R-CLI-1). Subcommands import heavy stacks only when they run."""

from __future__ import annotations

import typer

from agentd import __version__
from agentd.cli import approvals, audit, docs, history, memory, ops, run, schedule, workflows

app = typer.Typer(
    name="agentd",
    help="A personal AI agent on your own server, talked to over Telegram.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("run")(run.run)
app.command("history")(history.history)
app.command("pending")(approvals.pending)
app.command("approve")(approvals.approve)
app.command("deny")(approvals.deny)
app.command("audit")(audit.audit)
app.command("usage")(ops.usage)
app.command("backup")(ops.backup)
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
