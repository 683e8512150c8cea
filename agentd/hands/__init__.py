"""Hands: the agent acting on its server — workspace file tools and a sandboxed shell, each
action approved as the owner's policy says, audited, and run at most once across crashes."""
