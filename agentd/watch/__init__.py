"""Watches: "check X and tell me only if Y". Each reads a source on a schedule, compares it
with what it saw last (no model call when nothing changed), lets a small model decide whether
the change meets the owner's condition, and tells the owner only then; with a cost forecast,
daily caps, quiet hours, /mute, and loud failures."""
