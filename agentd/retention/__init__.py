"""How long things are kept: the prune rules and the daily prune as a durable workflow."""
