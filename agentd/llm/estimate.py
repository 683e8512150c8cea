"""A text's size in tokens, estimated: no tokenizer of the models is available offline.

About 4 characters a token for English prose and JSON with Claude's tokenizer; every estimate
agentd makes (a prompt window's cut, a document chunk's size, a watch's forecast, a broken
stream's bill) uses this one rule, so the figures agree with one another.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4


def tokens_in(chars: int) -> int:
    """About how many tokens `chars` characters of text make (rounded up)."""
    return -(-chars // CHARS_PER_TOKEN)
