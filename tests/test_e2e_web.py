"""End to end: web search through Tavily (cached) and through the provider's server-side tool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.tavily import FakeTavily

TAVILY_KEY = "tvly-test-key-123456"
RESULTS = [
    {
        "title": "agentd 1.0 released",
        "url": "https://example.org/agentd-1-0",
        "content": "agentd 1.0 is out with durable approvals.",
        "score": 0.9,
    }
]


def tool_results(llm: FakeAnthropic) -> list[dict[str, Any]]:
    out = []
    for request in llm.requests:
        for message in request["body"]["messages"]:
            if isinstance(message["content"], list):
                out += [b for b in message["content"] if b.get("type") == "tool_result"]
    return list({b["tool_use_id"]: b for b in out}.values())


def test_tavily_search_is_cited_and_cached(tmp_path: Path) -> None:
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as llm,
        FakeTavily.running(api_key=TAVILY_KEY) as tavily,
    ):
        tavily.set_results("agentd release", RESULTS)
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_WEB__PROVIDER="tavily",
            AGENTD_WEB__BASE_URL=tavily.base_url,
            TAVILY_API_KEY=TAVILY_KEY,
        )
        for n in (1, 2):
            llm.enqueue_tool_use("web_search", {"query": "agentd release"}, f"toolu_w{n}")
            llm.enqueue_text("It is out: [agentd 1.0](https://example.org/agentd-1-0).")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "is agentd 1.0 out?")
            tg.wait_for_sent(1, timeout=20)
            tg.add_message(OWNER, OWNER, "and again?")
            tg.wait_for_sent(2, timeout=20)
            assert len(tavily.requests) == 1  # the second search came from the cache
            results = tool_results(llm)
            assert len(results) == 2
            assert all("https://example.org/agentd-1-0" in r["content"] for r in results)
            assert all("<untrusted_content" in r["content"] for r in results)
            sent = tg.sent[-1]
            assert '<a href="https://example.org/agentd-1-0">' in sent["text"]
            audit = daemon.query("SELECT detail FROM audit WHERE kind = 'web_search'")
            assert [('"cached": true' in r[0]) for r in audit] == [False, True]
        assert TAVILY_KEY not in daemon.log()


def test_provider_side_search_answers_with_sources(tmp_path: Path) -> None:
    answer = [
        {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {"query": "agentd release"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://example.org/agentd-1-0",
                    "title": "agentd 1.0 released",
                    "encrypted_content": "abc",
                    "page_age": None,
                }
            ],
        },
        {
            "type": "text",
            "text": "agentd 1.0 is out.",
            "citations": [
                {
                    "type": "web_search_result_location",
                    "url": "https://example.org/agentd-1-0",
                    "title": "agentd 1.0 released",
                    "encrypted_index": "xyz",
                    "cited_text": "agentd 1.0 is out",
                }
            ],
        },
    ]
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_WEB__PROVIDER="anthropic",
            AGENTD_CHAT__STREAMING="false",
        )
        llm.set_responder(lambda body: answer)
        with running_daemon(tmp_path, env):
            tg.add_message(OWNER, OWNER, "is agentd 1.0 out?")
            sent = tg.wait_for_sent(1, timeout=20)[0]
            tools = llm.requests[0]["body"]["tools"]
            assert {"type": "web_search_20250305", "name": "web_search"}.items() <= tools[
                -1
            ].items()
            assert sent["plain_text"].startswith("agentd 1.0 is out.")
            assert (
                '<a href="https://example.org/agentd-1-0">agentd 1.0 released</a>' in sent["text"]
            )
