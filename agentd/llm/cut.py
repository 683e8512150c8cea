"""What an answer stream that broke partway, or was stopped, cost, whatever the provider: the
API bills the tokens it had generated, so the ledger records the attempt (types.CutAttempt)
though no answer came of it. Where the stream had not reported a count yet, the count is
estimated from the text and marked as an estimate; the rule is this module's alone (a whole
stream from a server that sends no count is estimated by it too: openai_mapping.py).
"""

from __future__ import annotations

from agentd.llm.estimate import tokens_in
from agentd.llm.types import CutAttempt, Usage


def estimated(model: str, attempt: int, reported: Usage, written_chars: int) -> CutAttempt:
    """The attempt's cost with its output estimated from the characters it wrote (never less
    than a count the stream did report)."""
    usage = with_output_estimated(reported, written_chars)
    return CutAttempt(model=model, attempt=attempt, usage=usage, estimated=True)


def with_output_estimated(reported: Usage, written_chars: int) -> Usage:
    """`reported` with its output estimated from the characters written, never less than it
    says: for a stream cut before its count, or one whose server never sends a count."""
    output = max(reported.output_tokens, tokens_in(written_chars))
    return reported.model_copy(update={"output_tokens": output})
