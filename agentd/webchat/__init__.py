"""The web chat: the owner's chat with the agent as a page of the dashboard, behind its login,
as one more channel through the channel door (intake persisted before the page is answered,
answers kept with a cursor so a reloaded page sees each once)."""
