"""The process itself: logging and redaction, the single-daemon lease, systemd notification,
and how start-up is made fast.

Start-up, in one place: `lazy_packages` makes a package whose `__init__.py` only re-exports
bind each name when first read (used for the Anthropic SDK by `llm/anthropic_loader.py`);
`telegram/aiogram_loader.py` lets pydantic build aiogram's Telegram types on first use instead
of all ~300 at import; `gc_pause` pauses cyclic GC while start-up imports run. Each proves
itself when loaded and falls back to the plain import with one log line; none names a library
version, and CI runs their equivalence tests on the lowest and newest versions allowed.
"""
