"""Documents (SPEC §9): ingest files, folders, URL lists and sitemaps; search them by meaning.

- `chunking`: structure-aware chunks (headings, paragraphs, section paths), pure functions;
- `loaders`: .txt, .md, .html, .pdf (pypdf, imported on first use) to titled, structured blocks;
- `store`: documents, chunks, FTS and vectors (the vector code memory uses too);
- `ingest`: incremental ingestion by content hash, `ingest(...)` → `IngestReport`;
- `sitemap`: sitemap and sitemap index reading through the SSRF-safe fetcher;
- `search`: hybrid chunk search (memory's FTS query building and fusion);
- `tools`: the search_docs tool, `docs_tools(db, embedder, config)`.

Nothing is imported here, so `agentd docs ls` does not pay for aiohttp.
"""
