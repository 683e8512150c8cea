"""The web_search tool (R-WEB-1): cached provider results, numbered, untrusted, to be cited."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentd.config import Config, WebConfig, read_secret
from agentd.db.runner import Runner
from agentd.durable.clock import Clock, SystemClock
from agentd.ledger import audit
from agentd.tools import Tool, ToolContext, ToolError, Toolset, mark_untrusted
from agentd.tools.citations import heading, source_list, url_id
from agentd.web.cache import SearchCache, query_digest
from agentd.web.search import (
    MAX_RETRY_WAIT,
    SearchError,
    SearchProvider,
    SearchResult,
    TavilyProvider,
)

log = logging.getLogger(__name__)

SNIPPET_CHARS = 500
CITE_INSTRUCTION = (
    "Base your answer on these results where they help, and cite every result you use by its "
    "id in square brackets right after the claim, as in [W3f9a1c]; the reply makes it a link."
)


class WebSearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        max_length=400,
        description="What to search the web for: a few keywords or a short question.",
    )
    max_results: int | None = Field(
        default=None, ge=1, le=20, description="How many results; leave out for the default."
    )

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the query is empty")
        return value.strip()


def _age(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    if minutes < 1:
        return "less than a minute ago"
    if minutes < 120:
        return f"{minutes} min ago"
    return f"{round(minutes / 60)} h ago"


def render_results(
    query: str, results: list[SearchResult], provider: str, cached_age: float | None = None
) -> str:
    """Numbered results (title, URL, date, snippet) wrapped as untrusted, then how to cite."""
    when = "just now" if cached_age is None else f"cached, fetched {_age(cached_age)}"
    lines = [f"Web search results for: {query}", f"({len(results)} from {provider}, {when})"]
    for hit in results:
        lines += ["", heading(url_id("W", hit.url), hit.title), f"URL: {hit.url}"]
        if hit.published:
            lines.append(f"Published: {hit.published}")
        if hit.snippet:
            snippet = hit.snippet
            if len(snippet) > SNIPPET_CHARS:
                snippet = snippet[:SNIPPET_CHARS].rstrip() + "…"
            lines.append(snippet)
    # The instruction stays outside the untrusted block: inside it, the model ignores orders.
    untrusted = mark_untrusted("\n".join(lines), f"web_search:{provider}")
    cited = source_list((url_id("W", hit.url), hit.url) for hit in results)
    return f"{untrusted}\n\n{CITE_INSTRUCTION}\n\n{cited}".rstrip()


def web_tools(db: Runner, provider: SearchProvider, config: WebConfig, clock: Clock) -> list[Tool]:
    """The web_search tool over `provider`, cached in `db` for config.cache_ttl seconds."""
    cache = SearchCache(db, config.cache_ttl)

    async def record(ctx: ToolContext, digest: str, n: int, cached: bool, error: str = "") -> None:
        # The query is the user's content, and the audit log keeps none: a digest ties a search
        # to its cache entry and its repeats without saying what was searched.
        detail: dict[str, object] = {
            "provider": provider.name,
            "query_digest": digest,
            "cached": cached,
            "results": n,
        }
        if error:
            detail["error"] = error
        source_key = f"web_search:{ctx.instance_id}:{ctx.tool_use_id}" if ctx.tool_use_id else None
        await db.write(
            partial(
                audit.record,
                kind="web_search",
                chat_id=ctx.chat_id,
                user_id=ctx.user_id,
                instance_id=ctx.instance_id or None,
                detail=detail,
                source_key=source_key,
                at=clock.now(),
            )
        )

    # Every attempt may take the full timeout, and each retry may wait up to MAX_RETRY_WAIT.
    budget = config.timeout * (config.retries + 1) + config.retries * MAX_RETRY_WAIT + 5
    web = Toolset()

    # Results are pages written by anyone: outside content.
    @web.tool(
        risk="low",
        timeout=budget,
        taints=True,
        description="Search the web for current information: news, facts that change, "
        "anything not in memory or the owner's documents. Returns numbered results with "
        "titles, URLs and snippets; cite the URLs you use as Markdown links. Use fetch_url "
        "to read a result in full.",
    )
    async def web_search(ctx: ToolContext, args: WebSearchArgs) -> str:
        size = args.max_results or config.max_results
        digest = query_digest(args.query)
        now = clock.now()
        hit = await cache.get(provider.name, size, args.query, now)
        if hit is not None:
            results, age = hit.results[:size], now - hit.fetched_at
        else:
            try:
                results = (await provider.search(args.query, size))[:size]
            except SearchError as exc:
                log.warning(
                    "web search failed",
                    extra={"provider": provider.name, "kind": exc.kind, "status": exc.status},
                )
                await record(ctx, digest, 0, cached=False, error=exc.kind)
                raise ToolError(f"Web search failed: {exc}") from None
            age = None
            await cache.put(provider.name, size, args.query, results, clock.now())
        await record(ctx, digest, len(results), cached=hit is not None)
        if not results:
            return f"The web search found nothing for: {args.query}. Try other keywords."
        return render_results(args.query, results, provider.name, age)

    return web.tools()


def build_web_tools(
    config: Config | WebConfig,
    env: Mapping[str, str],
    db: Runner,
    clock: Clock | None = None,
) -> tuple[list[Tool], list[str]]:
    """The web tools `[web]` asks for, and problems to report (a missing key names its variable).

    No provider, or "anthropic" (the LLM adapter's server-side tool): no local tool.
    """
    web = config.web if isinstance(config, Config) else config
    if web.provider != "tavily":
        return [], []
    if not web.api_key_env:
        return [], ["web.provider is 'tavily' but web.api_key_env is empty; web_search is off"]
    key = read_secret(web.api_key_env, env)
    if not key:
        return [], [
            f"web.provider is 'tavily' but ${web.api_key_env} is not set (in the environment, "
            "agentd.env or a systemd credential); web_search is off"
        ]
    provider = TavilyProvider(
        key,
        base_url=web.base_url,
        search_depth=web.search_depth,
        timeout=web.timeout,
        retries=web.retries,
    )
    return web_tools(db, provider, web, clock or SystemClock()), []
