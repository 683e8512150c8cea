"""The process itself: logging and redaction, the single-daemon lease, systemd notification,
and how start-up is made fast.

Start-up, in one place: the model is reached over plain HTTP (`llm/messages_http.py`), so no
SDK is imported at all; `telegram/aiogram_loader.py` lets pydantic build aiogram's Telegram
types on first use instead of all ~300 at import (it proves itself when loaded and falls back
to the plain import with one log line; it names no aiogram version, and CI runs its
equivalence tests on the lowest and the newest aiogram and pydantic allowed); `gc_pause`
pauses cyclic GC while start-up imports run.
"""
