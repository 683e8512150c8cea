"""agentd: a personal AI agent on your own server, talked to over Telegram."""

__version__ = "0.1.0"
