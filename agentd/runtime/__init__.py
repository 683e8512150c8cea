"""The process itself: logging and redaction, the single-daemon lease, systemd notification,
and how start-up is made fast.

Start-up, in one place: the official `anthropic` SDK is imported in a thread from the moment the
model adapter is built (`llm/preload.py`), while the daemon waits on Telegram and the database;
`telegram/aiogram_loader.py` lets pydantic build aiogram's Telegram
types on first use instead of all ~300 at import (it proves itself when loaded and falls back
to the plain import with one log line; it names no aiogram version, and CI runs its
equivalence tests on the lowest and the newest aiogram and pydantic allowed); `gc_pause`
pauses cyclic GC while start-up imports run.
"""
