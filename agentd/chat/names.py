"""Names that several packages must spell the same way, or in-flight work is stranded.

A workflow name is journaled with every instance and resolved again at recovery; a key
serialises the instances that share it (one turn at a time per chat).
"""

from __future__ import annotations

TURN_WORKFLOW = "turn"
TASK_WORKFLOW = "task"  # a background task (agentd/tasks/)


COMMAND_WORKFLOW = "command"  # a chat command's reply (commands/router.py)


def command_key(chat_id: int) -> str:
    """A chat's commands run one at a time, beside (not behind) its turns: /stop is answered
    while a turn works."""
    return f"cmd-{chat_id}"


def chat_actor(user_id: int) -> str:
    """Who changed something from a chat (a button, a command), on whichever channel: the
    `by` of its audit entry."""
    return f"chat:{user_id}"


def chat_key(chat_id: int) -> str:
    """The key that makes a chat's turns run one at a time, whoever started them."""
    return f"chat-{chat_id}"


# The morning briefing's schedules (the daily one, and `agentd briefing run`'s once-off): their
# turns ask the `briefing` model of [llm.models].
BRIEFING_PREFIX = "briefing-"
BRIEFING_ONCE_PREFIX = f"{BRIEFING_PREFIX}now-"


def turn_purpose(schedule_id: str | None) -> str:
    """Which [llm.models] purpose a turn asks: the briefing's own, else the chat's."""
    briefing = (BRIEFING_PREFIX, BRIEFING_ONCE_PREFIX)
    return "briefing" if schedule_id and schedule_id.startswith(briefing) else "turn"
