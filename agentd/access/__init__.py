"""Who may do what: pairing new users, approvals of risky tool calls, and rate limits."""
