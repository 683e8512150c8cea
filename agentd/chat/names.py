"""Names that several packages must spell the same way, or in-flight work is stranded.

A workflow name is journaled with every instance and resolved again at recovery; a key
serialises the instances that share it (one turn at a time per chat).
"""

from __future__ import annotations

TURN_WORKFLOW = "turn"
TASK_WORKFLOW = "task"  # a background task (agentd/tasks/)


def chat_key(chat_id: int) -> str:
    """The key that makes a chat's turns run one at a time, whoever started them."""
    return f"chat-{chat_id}"
