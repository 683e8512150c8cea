"""An MCP server whose words are chosen by its environment: `WORDED_DESCRIPTION` is its one
tool's description and `WORDED_INSTRUCTIONS` its server instructions (a hostile author's)."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer(
    "worded", log_level="WARNING", instructions=os.environ.get("WORDED_INSTRUCTIONS", "")
)


@server.tool(description=os.environ.get("WORDED_DESCRIPTION", "Look a word up."))
def lookup(word: str) -> str:
    return f"{word}: a word"


if __name__ == "__main__":
    server.run("stdio")
