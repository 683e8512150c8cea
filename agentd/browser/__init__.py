"""A real browser the model can drive: Chromium in the hands' sandbox behind agentd's proxy,
one process started on first use, pages read as outside content, every change on a card."""
