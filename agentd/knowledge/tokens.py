"""A chunk's size in tokens, estimated: 4 characters a token, as the prompt window counts.

No tokenizer of the model is available offline; the estimate is what `agentd docs ls` shows
and what migration m029_docs_status computed for chunks stored before (the same formula in
SQL), so old and new rows agree.
"""

from __future__ import annotations


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4
