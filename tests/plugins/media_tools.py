"""A plugin tool that produces a report file (send_file)."""

from __future__ import annotations

from agentd.tools import OutgoingFile, ToolContext, tool


@tool(risk="low")
async def weekly_report(ctx: ToolContext, week: int) -> OutgoingFile:
    """Build the weekly report as a CSV file the user receives as a document."""
    rows = ["day,steps"] + [f"{day},{1000 * (day + week)}" for day in range(1, 8)]
    return OutgoingFile(
        filename=f"report-week-{week}.csv", data="\n".join(rows).encode(), caption=f"Week {week}"
    )
