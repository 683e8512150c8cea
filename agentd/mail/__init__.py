"""Mail: the owner's mailboxes over IMAP and SMTP — search, read, draft, send exactly once,
move and flag, and watching new mail with IDLE under owner rules (no model call)."""
