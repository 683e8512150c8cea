"""The `agentd` command line (typer): one module per command group, on top of everything.

Commands read and write the same SQLite database as the daemon (WAL), so they work while it
runs. Nothing heavy is imported at the top of a module: `agentd history` must not pay for
aiogram or the model SDK (tests/test_cli_lazy.py).
"""
