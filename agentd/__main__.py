"""`python -m agentd`."""

from agentd.cli.app import main

main()
