"""What happened and what it cost: the audit log, token usage and its pricing."""
