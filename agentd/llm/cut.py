"""What an answer stream that broke partway, or was stopped, cost, whatever the provider: the
API bills the tokens it had generated, so the ledger records the attempt (types.CutAttempt)
though no answer came of it. Where the stream had not reported a count yet, the count is
estimated from the text and marked as an estimate; the rule is this module's alone.
"""

from __future__ import annotations

from agentd.llm.estimate import tokens_in
from agentd.llm.types import CutAttempt, Usage


def estimated(model: str, attempt: int, reported: Usage, written_chars: int) -> CutAttempt:
    """The attempt's cost with its output estimated from the characters it wrote (never less
    than a count the stream did report)."""
    output = max(reported.output_tokens, tokens_in(written_chars))
    usage = reported.model_copy(update={"output_tokens": output})
    return CutAttempt(model=model, attempt=attempt, usage=usage, estimated=True)
