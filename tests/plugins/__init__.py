"""Plugin modules loaded by the tool tests through `[tools] plugins`."""
