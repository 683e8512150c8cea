"""Telegram chat commands (/help, /new, /stop, …): one router, run as durable workflows."""
