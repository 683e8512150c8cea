"""Drive agentd's Anthropic adapter against the fake API and print what came out, as JSON.

Run as `python -m tests.anthropic_corpus lazy|eager|broken`: one SDK import per process, so
the lazy and the eager import are each seen in a fresh interpreter and compared by
tests/test_anthropic_loader.py. Every kind of answer the adapter handles goes through the real
SDK and the local fake (tests/fakes/anthropic.py): plain and streamed text, tool use, each
error class, a stream cut by `event: error`, a dropped connection and a malformed body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from agentd.llm import anthropic_loader
from agentd.llm.types import LLMError, LLMRequest, Message, ToolSpec
from tests.fakes import FakeAnthropic

REQUEST = LLMRequest(
    messages=[Message(role="user", content="What is the weather?")],
    tools=[ToolSpec(name="weather", description="Weather now", input_schema={"type": "object"})],
)
CASES = {
    "text": lambda f: f.enqueue_text("Sunny."),
    "tool_use": lambda f: f.enqueue_tool_use(
        "weather", {"city": "Oslo"}, "toolu_corpus", text_before="Let me see."
    ),
    "rate_limited": lambda f: f.enqueue_error(429, retry_after=0),
    "overloaded": lambda f: f.enqueue_error(529),
    "bad_request": lambda f: f.enqueue_error(400),
    "unauthorized": lambda f: f.enqueue_error(401),
    "spend_limit": lambda f: f.enqueue_error(
        429, "enforced_spend_limit_reached_error", "Spend limit reached"
    ),
    "stream_error": lambda f: f.enqueue_stream_error(),
    "dropped": lambda f: f.enqueue_drop(),
    "malformed": lambda f: f.enqueue_malformed(),
}


async def _answers(base_url: str, fake: FakeAnthropic) -> dict[str, Any]:
    from agentd.config import LLMConfig
    from agentd.llm.anthropic_adapter import AnthropicLLM

    llm = AnthropicLLM(LLMConfig(base_url=base_url, retries=0), "sk-ant-corpus-key")
    out: dict[str, Any] = {}
    try:
        for streamed in (False, True):
            for name, enqueue in CASES.items():
                enqueue(fake)
                seen: list[str] = []

                async def on_text(text: str, seen: list[str] = seen) -> None:
                    seen.append(text)

                try:
                    answer = await llm.complete(REQUEST, on_text if streamed else None)
                    result: Any = answer.model_dump(mode="json")
                except LLMError as exc:
                    result = {"error": str(exc), "retryable": exc.retryable, "status": exc.status}
                out[f"{name}{' streamed' if streamed else ''}"] = {"result": result, "text": seen}
                fake.reset()
    finally:
        await llm.close()
    return out


def _namespace() -> dict[str, list[str]]:
    """Every name `anthropic` and `anthropic.types` bind: what it is and where it says it is.

    Submodules are left out: an eager import binds every one its `__init__` imported.
    """
    import types

    import anthropic

    out = {}
    for module in (anthropic, anthropic.types):
        values = {n: getattr(module, n) for n in dir(module) if not n.startswith("_")}
        out[module.__name__] = sorted(
            f"{name}={type(value).__name__}:{getattr(value, '__module__', '')}"
            f".{getattr(value, '__qualname__', '')}"
            for name, value in values.items()
            if not isinstance(value, types.ModuleType)
        )
    return out


def main(argv: list[str]) -> None:
    mode = argv[0]
    logging.basicConfig(
        stream=sys.stdout, level=logging.WARNING, format="LOG %(name)s %(levelname)s %(message)s"
    )
    if mode == "broken":  # a package fails mid-way: the fallback must import the whole SDK
        from agentd.runtime import lazy_packages

        original = lazy_packages._LazyPackage.install

        def fail_on_types(self: Any) -> None:
            if self.module.__name__ == "anthropic.types":
                raise RuntimeError("simulated failure")
            original(self)

        lazy_packages._LazyPackage.install = fail_on_types  # type: ignore[method-assign]
    loaded = anthropic_loader.load(lazy=mode != "eager")
    modules_at_load = sum(1 for m in sys.modules if m.startswith("anthropic"))
    with FakeAnthropic.running() as fake:
        answers = asyncio.run(_answers(fake.base_url, fake))
    modules_after_requests = sum(1 for m in sys.modules if m.startswith("anthropic"))
    result = {
        "mode": loaded,
        "again": anthropic_loader.load(lazy=True),
        "modules": [modules_at_load, modules_after_requests],
        "answers": answers,
        "namespace": _namespace(),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
