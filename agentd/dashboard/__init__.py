"""The owner's dashboard: server-rendered pages over the same queries the CLI uses.

Private by design: loopback by default, one-time login links, a session cookie, CSRF and
Origin checks on every change, and no background work while nobody has a page open.
"""
