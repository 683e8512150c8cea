"""Long-term memory (SPEC §8): the per-user store, its hybrid search, facts and summaries.

Storage and search are plain functions of a SQLite connection (run them through
`Database.write/read` in the daemon, or directly on `open_sync` in the CLI); embedding is async
and happens outside any transaction. See store.py for the layout; embedding and fusion live in
`retrieval/`.
"""

from agentd.db.runner import ConnRunner, Runner
from agentd.memory.facts import (
    ExtractedFact,
    ExtractedFacts,
    FactChange,
    apply_extracted_facts,
    facts_for_prompt,
    list_facts,
    normalise_slot,
    outside_facts_in_prompt,
    remember_facts,
    retract_fact,
    upsert_fact,
)
from agentd.memory.in_context import words_in_context
from agentd.memory.search import (
    MemoryHit,
    format_recall,
    keyword_search,
    search,
    search_memories,
    vector_search,
)
from agentd.memory.store import (
    FACT_KINDS,
    Memory,
    MemoryKind,
    MemoryStoreError,
    NewMemory,
    VectorStatus,
    add_memories,
    add_memory,
    count_memories,
    forget,
    forget_user,
    get_memory,
    list_memories,
    reindex,
    remember,
    taints,
    vector_status,
)
from agentd.retrieval.embedders import (
    E5SmallEmbedder,
    Embedder,
    EmbedderError,
    HashingEmbedder,
    HttpEmbedder,
    LocalEmbedder,
    build_embedder,
)
from agentd.retrieval.fts import build_fts_query
from agentd.retrieval.fusion import Fusion, SearchMode, fusion_from_config
from agentd.retrieval.reembed import ReindexReport

__all__ = [
    "FACT_KINDS",
    "ConnRunner",
    "E5SmallEmbedder",
    "Embedder",
    "EmbedderError",
    "ExtractedFact",
    "ExtractedFacts",
    "FactChange",
    "Fusion",
    "HashingEmbedder",
    "HttpEmbedder",
    "LocalEmbedder",
    "Memory",
    "MemoryHit",
    "MemoryKind",
    "MemoryStoreError",
    "NewMemory",
    "ReindexReport",
    "Runner",
    "SearchMode",
    "VectorStatus",
    "add_memories",
    "add_memory",
    "apply_extracted_facts",
    "build_embedder",
    "build_fts_query",
    "count_memories",
    "facts_for_prompt",
    "forget",
    "forget_user",
    "format_recall",
    "fusion_from_config",
    "get_memory",
    "keyword_search",
    "list_facts",
    "list_memories",
    "normalise_slot",
    "outside_facts_in_prompt",
    "reindex",
    "remember",
    "remember_facts",
    "retract_fact",
    "search",
    "search_memories",
    "taints",
    "upsert_fact",
    "vector_search",
    "vector_status",
    "words_in_context",
]
