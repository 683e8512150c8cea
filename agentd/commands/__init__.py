"""Chat commands (/help, /new, /stop, …) and buttons: one platform-neutral router whose commands
run as durable workflows; `telegram/` only feeds it updates."""
