"""Tiny MCP servers the tests start as subprocesses."""
