"""A plugin with a badly declared tool: loading it must report a problem, not crash."""

from agentd.tools import tool


@tool()
def not_async(text: str) -> str:
    """Tools must be async; this one is not."""
    return text
