"""A tiny MCP server for the tests: `python echo_server.py` (stdio) or `… http PORT`."""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("echo", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def fail(message: str) -> str:
    """Always fail with the given message."""
    raise ToolError(message)


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def crash() -> str:
    """Exit the server process at once, as a crash would."""
    os._exit(1)


if __name__ == "__main__":
    if token := os.environ.get("ECHO_TOKEN"):
        # As many servers do: a setup line on stderr that quotes the token it was handed.
        print(f"echo: GET https://api.example.com/me?access_token={token} -> 401", file=sys.stderr)
        sys.stderr.flush()
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
