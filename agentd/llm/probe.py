"""Every configured model, described and tried with one tiny call: what `agentd models` lists
and `agentd doctor` checks (a failing model is named, with why and what to do)."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, Field

from agentd.config.models import ModelSettings
from agentd.llm.fallback import FallbackLLM
from agentd.llm.pricing import price_note
from agentd.llm.types import LLMError, LLMRequest, Message, Usage

PING = LLMRequest(
    purpose="extract", messages=[Message(role="user", content="Say OK.")], max_tokens=8
)
HINTS = {
    "auth": "check the provider's key variable (api_key_env) or ANTHROPIC_API_KEY",
    "billing": "the account is out of credit or over its spend limit",
    "unreachable": "is the server running, and is base_url right?",
    "timeout": "the server did not answer in time; is it loading the model?",
    "bad_request": "is the model name right for this provider?",
}


class ModelCheck(BaseModel):
    model: str  # the label: `claude-…` or `provider/model`
    purposes: list[str]  # where it is first choice or a fallback
    price: str  # price_note: list price, configured, local: costs 0, unknown
    tools: bool | None
    images: bool | None
    breaker: str  # closed | open | half-open (this process)
    ok: bool | None = None  # None: not tried
    seconds: float | None = None
    problem: str | None = None
    # The tokens the try cost, for the ledger (cli/check_usage.py); None: nothing was answered.
    spent: Usage | None = Field(default=None, exclude=True)


def describe(llm: FallbackLLM, settings: ModelSettings) -> list[ModelCheck]:
    """Each model once, in the order the turn's chain tries them, then the others."""
    purposes: dict[str, list[str]] = {}
    for purpose, chain in llm.chains.items():
        for cand in chain:
            purposes.setdefault(cand.ref.label, []).append(purpose)
    out = []
    for row in llm.status():
        provider = settings.provider(settings.ref(row["model"]).provider)
        out.append(
            ModelCheck(
                model=row["model"],
                purposes=purposes.get(row["model"], []),
                price=price_note(row["model"], settings),
                tools=provider.tools,
                images=provider.images,
                breaker=row["state"],
            )
        )
    return out


async def _try(llm: FallbackLLM, check: ModelCheck, timeout: float) -> ModelCheck:
    cand = next(c for c in llm.candidates() if c.ref.label == check.model)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            answer = await cand.llm.complete(PING, model=cand.ref.model, attempts=1)
    except LLMError as exc:
        hint = HINTS.get(exc.reason, "")
        problem = f"{exc} ({exc.reason})" + (f": {hint}" if hint else "")
        spent = exc.spent.usage if exc.spent is not None else None
        return check.model_copy(update={"ok": False, "problem": problem, "spent": spent})
    except TimeoutError:
        problem = f"no answer within {timeout:g} s: {HINTS['timeout']}"
        return check.model_copy(update={"ok": False, "problem": problem})
    seconds = round(time.perf_counter() - started, 2)
    return check.model_copy(update={"ok": True, "seconds": seconds, "spent": answer.usage})


async def probe(llm: FallbackLLM, settings: ModelSettings, timeout: float = 30) -> list[ModelCheck]:
    """Describe every model and try each with one tiny call, all at once."""
    checks = describe(llm, settings)
    return list(await asyncio.gather(*(_try(llm, c, timeout) for c in checks)))
