"""The agent: the turn workflow, its system prompt and the tool loop."""
