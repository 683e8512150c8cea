"""A chunk's size in tokens, estimated by the one rule (llm/estimate.py), as the prompt
window counts.

No tokenizer of the model is available offline; the estimate is what `agentd docs ls` shows
and what migration m029_docs_status computed for chunks stored before (the same formula in
SQL), so old and new rows agree.
"""

from __future__ import annotations

from agentd.llm.estimate import tokens_in


def estimate_tokens(text: str) -> int:
    return tokens_in(len(text))
