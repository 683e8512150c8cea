"""Web search (R-WEB-1): providers, a SQLite cache by query, and the web_search tool.

The daemon registers `build_web_tools(config, env, db, clock)`; with `[tools.web] provider = ""` or
no API key it returns no tool, with "anthropic" the LLM adapter searches server-side instead.
"""

from agentd.web.cache import SearchCache, normalise_query, query_digest
from agentd.web.search import SearchError, SearchProvider, SearchResult, TavilyProvider
from agentd.web.tools import WebSearchArgs, build_web_tools, render_results, web_tools

__all__ = [
    "SearchCache",
    "SearchError",
    "SearchProvider",
    "SearchResult",
    "TavilyProvider",
    "WebSearchArgs",
    "build_web_tools",
    "normalise_query",
    "query_digest",
    "render_results",
    "web_tools",
]
