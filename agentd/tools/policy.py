"""The risk of one call: the tool's own level, its per-call assessment, and the turn's taint.

A tool has a fixed risk (config may override it). Two things can change a single call's:
- the tool's `assess(args, state)`: a shell command on the read-only allowlist is low, a
  command that chains or redirects is high; whatever it says comes with the reason;
- the context: while the model has outside content in view (a web page, a mail, a document,
  a forwarded message still in the history window: agent/taint.py), a tool with `egress` (it
  can send data out, leave instructions behind, or change the owner's mail, calendar, files,
  schedules or memory) asks the owner, whatever its level, with the reason on the card.
Nothing here can make a call less guarded than the owner's configured level, except `assess`
of the tool itself (its own allowlist), and never in a tainted turn for an egress tool unless
`assess` says this very call has no egress (a read-only command with no network).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentd.tools.base import Assessment, CallState, Tool

# How every reason that a call asks because of outside content begins (the pending list reads
# it back: a waiting call's arguments were written with outside content in view).
OUTSIDE_REASON = "this turn read outside content"


def asks_outside_private(what: str) -> Callable[[Any, CallState], Assessment | None]:
    """An `assess` for a tool that writes its user's own state (memories, reminders): in a
    chat others write in too, their words are in view and may be what asks for it, so it asks
    the owner there, as reading that state is refused there."""

    def assess(args: Any, state: CallState) -> Assessment | None:
        if state.private:
            return None
        return Assessment(
            risk="high",
            reason=f"this chat is not private: other members' words are in view, and {what}",
        )

    return assess


def call_risk(tool: Tool, args: object, state: CallState) -> Assessment:
    """This call's risk and why (an empty reason: the tool's own level)."""
    verdict = Assessment(risk=tool.risk)
    if tool.assess is not None:
        verdict = tool.assess(args, state) or verdict
    egress = tool.egress if verdict.egress is None else verdict.egress
    if state.tainted_by and egress and verdict.risk != "high":
        sources = ", ".join(state.tainted_by[:3])
        verdict = Assessment(
            risk="high",
            reason=f"{OUTSIDE_REASON} ({sources}) and {tool.name} can send "
            "data out or leave instructions behind",
        )
    return verdict
