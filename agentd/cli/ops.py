"""Operations: `agentd usage` (R-AUD-2), `agentd backup` and `agentd doctor` (R-OPS-2, R-OPS-3)."""

from __future__ import annotations

import json as jsonlib
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Annotated

import typer

from agentd.access import owners
from agentd.cli.common import (
    EXIT_CONFIG,
    ConfigOption,
    JsonOption,
    config_or_exit,
    database,
    err,
    fail,
    foreign_owner,
    new_table,
    out,
    print_json,
    print_table,
    transaction,
)
from agentd.config import Config, ConfigError, load_config


def usage(
    days: Annotated[int, typer.Option(help="How many days back.", min=1)] = 30,
    schedule: Annotated[
        str | None, typer.Option(help="Only the runs of this schedule (e.g. the briefing's id).")
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Tokens, prompt-cache hits, estimated cost and saving, vision-cache hits per day and chat."""
    from agentd.ledger.pricing import PRICES_AS_OF
    from agentd.ledger.usage import report, totals, vision_counts

    cfg = config_or_exit(config)
    # A schedule's runs are instances sched-<id>-<due> and their turns (…-turn).
    prefix = f"sched-{schedule}-" if schedule else None
    with database(cfg) as conn:
        found = totals(conn, since=time.time() - days * 86400, instance_prefix=prefix)
        vision = None if schedule else vision_counts(conn, since=time.time() - days * 86400)
        rows = report(found, cfg.llm.prices, vision)
    if json:
        print_json([r.model_dump() for r in rows])
        return
    table = new_table(
        "day",
        "chat",
        "calls",
        "input",
        "output",
        "cache\nread",
        "cache\nwrite",
        "hit\nratio",
        "≈ USD",
        "≈ saved\nUSD",
        "vision\ncache",
    )
    for r in rows:
        lookups = r.vision_cache_hits + r.vision_cache_misses
        table.add_row(
            r.day,
            str(r.chat_id or "-"),
            str(r.calls),
            str(r.input_tokens),
            str(r.output_tokens),
            str(r.cache_read_tokens),
            str(r.cache_write_tokens),
            f"{r.cache_hit_ratio:.0%}",
            f"{r.estimated_cost_usd:.4f}",
            f"{r.estimated_saving_usd:.4f}",
            f"{r.vision_cache_hits}/{lookups}" if lookups else "-",
        )
    print_table(
        table,
        drop=("cache\nwrite", "cache\nread", "≈ saved\nUSD", "vision\ncache"),
        empty=f"No model calls in the last {days} days.",
    )
    if rows:  # markup off: "[llm.prices]" is the config section, not a style
        err.print(
            f"Estimates at list prices as of {PRICES_AS_OF} (override: [llm.prices]); "
            "saving = the same calls without prompt caching; vision cache = photos whose "
            "summary was reused / photos seen.",
            markup=False,
        )


def backup(
    destination: Annotated[Path, typer.Argument(help="Where to write the copy.")],
    config: ConfigOption = None,
) -> None:
    """Make a consistent copy of the database while the daemon runs (SQLite online backup)."""
    from agentd.db import open_sync

    cfg = config_or_exit(config)
    if destination.exists():
        fail(f"{destination} exists; choose a new file name")
    if not destination.parent.is_dir():  # a typo in the folder must not become a new folder
        fail(
            f"{destination.parent} does not exist; create it first (mkdir -p "
            f"{destination.parent}) or choose another place"
        )
    from agentd.retention.prune import mark_backup

    with database(cfg) as conn:
        old = os.umask(0o077)
        try:
            target = open_sync(destination)
        finally:
            os.umask(old)
        with transaction(conn):  # the daily prune does not VACUUM while this copy runs
            mark_backup(conn, True)
        try:
            conn.backup(target)
            mark_backup(target, False)  # the copy must not inherit the "backup running" marker
        finally:
            target.close()
            with transaction(conn):
                mark_backup(conn, False)
    out.print(f"Backed up {cfg.db_path} to {destination}.")


def _check(
    name: str, ok: bool, detail: str, results: list[dict[str, object]], *, warn: bool = False
) -> None:
    results.append({"check": name, "ok": ok, "detail": detail, "warn": warn and ok})


def _http_json(url: str, headers: dict[str, str]) -> tuple[int, object]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, jsonlib.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def doctor(json: JsonOption = False, config: ConfigOption = None) -> None:
    """Check config, database, sqlite-vec, Telegram, Anthropic, mail and calendar accounts."""
    results: list[dict[str, object]] = []
    try:
        cfg: Config | None = load_config(config)
        if cfg.source:
            _check("config", True, cfg.source, results)
        else:
            _check(
                "config",
                True,
                "no config file found (./agentd.toml, $AGENTD_CONFIG, "
                "~/.config/agentd, /etc/agentd): defaults and environment only; run "
                "`agentd init`, or pass --config PATH",
                results,
                warn=True,
            )
    except ConfigError as exc:
        cfg = None
        _check("config", False, f"invalid configuration: {exc}", results)
    if cfg is not None:
        _doctor_database(cfg, results)
        _doctor_embedder(cfg, results)
        _doctor_telegram(cfg, results)
        _doctor_allowlist(cfg, results)
        _doctor_anthropic(cfg, results)
        _doctor_shell(cfg, results)
        _doctor_accounts(cfg, results)
        _doctor_skills(cfg, results)
    if json:
        print_json(results)
    else:
        for r in results:
            mark = (
                "[red]FAIL[/]"
                if not r["ok"]
                else "[yellow]warn[/]"
                if r["warn"]
                else "[green]ok[/]"
            )
            out.print(f"{mark}  {r['check']}: {r['detail']}", highlight=False)
    if cfg is None:
        raise typer.Exit(EXIT_CONFIG)
    if not all(r["ok"] for r in results):
        raise typer.Exit(1)


def _doctor_accounts(cfg: Config, results: list[dict[str, object]]) -> None:
    """Log in to each mail account (IMAP, SMTP) and calendar; name the step that failed."""
    if cfg.mail:
        from agentd.mail.check import check_account

        for account in cfg.mail:
            for name, ok, detail in check_account(account, cfg.secret_env(os.environ)):
                _check(name, ok, detail, results)
    if cfg.calendar:
        from agentd.calendar.check import check_calendar

        for calendar in cfg.calendar:
            name, ok, detail = check_calendar(
                calendar, cfg.secret_env(os.environ), cfg.agent.timezone
            )
            _check(name, ok, detail, results)


def _doctor_database(cfg: Config, results: list[dict[str, object]]) -> None:
    from agentd.db import DatabaseError, open_sync
    from agentd.db.migrations import pending

    path = cfg.db_path
    if not path.exists():
        _check("database", True, f"{path} will be created by `agentd run`", results)
        return
    if (owner := foreign_owner(path)) is not None:
        detail = (
            f"{path} belongs to {owner}; not opened as root (its files would become "
            f"root's): sudo -u {owner} agentd doctor"
        )
        _check("database", True, detail, results, warn=True)
        return
    try:
        conn = open_sync(path)
        try:
            version = conn.execute("SELECT vec_version()").fetchone()[0]
            todo = pending(conn)
        finally:
            conn.close()
    except DatabaseError as exc:
        _check("database", False, str(exc), results)
        return
    mode = path.stat().st_mode & 0o777
    private = mode & 0o077 == 0
    detail = (
        f"{path} ({oct(mode)}, owner-only)"
        if private
        else (f"{path} ({oct(mode)}) is readable by others: chmod 600 {path}")
    )
    _check("database", private, detail, results)
    _check("sqlite-vec", True, f"loaded, {version}", results)
    _check("migrations", True, f"{len(todo)} pending (applied at the next start)", results)


def _doctor_shell(cfg: Config, results: list[dict[str, object]]) -> None:
    """Whether the shell tool is offered: bubblewrap present and able to make namespaces."""
    from agentd.hands.sandbox import probe
    from agentd.hands.shell import sandbox_of

    shell = cfg.tools.shell
    if not shell.enabled:
        _check("shell", True, "off ([tools.shell] enabled = false)", results)
        return
    if shell.sandbox == "none":
        why = 'UNSANDBOXED: [tools.shell] sandbox = "none"; commands run directly on this server'
        _check("shell", True, f"{why} (every approval card says so)", results, warn=True)
        return
    from agentd.hands.files import Workspaces
    from agentd.hands.workspace import WorkspaceError

    workspace = Workspaces.from_config(cfg).base()
    try:
        workspace.ensure()  # created at the daemon's start anyway; the probe binds it
    except (OSError, WorkspaceError) as exc:
        _check(
            "shell",
            True,
            f"not offered: the workspace {workspace.root} cannot be "
            f"created ({exc}); set [tools.workspace] path",
            results,
            warn=True,
        )
        return
    problem = probe(sandbox_of(cfg), workspace.root)
    if problem:
        # A warning: agentd runs without the shell; the owner decides whether to fix it.
        _check("shell", True, f"not offered: {problem}", results, warn=True)
    else:
        _check(
            "shell",
            True,
            "bubblewrap sandbox works (namespaces, read-only system, no network)",
            results,
        )


def _doctor_embedder(cfg: Config, results: list[dict[str, object]]) -> None:
    """Which embedder is active, whether it loads, and whether stored vectors are of it."""
    from agentd.retrieval.embedders import E5SmallEmbedder, EmbedderError, build_embedder

    try:
        embedder = build_embedder(cfg.memory, os.environ)
        if isinstance(embedder, E5SmallEmbedder):
            embedder.load_sync()
    except EmbedderError as exc:
        _check("embedder", False, str(exc), results)
        return
    name = f"{cfg.memory.embedder}: {embedder.model_id}/{embedder.dim}"
    if isinstance(embedder, E5SmallEmbedder):
        name += f" on {embedder.engine}"
    if cfg.memory.embedder == "hashing":
        _check(
            "embedder",
            True,
            f"{name} — its vectors carry no meaning, so recall is keyword "
            "search only; set memory.embedder = 'e5-small' (the default)",
            results,
            warn=True,
        )
    else:
        _check("embedder", True, name, results)
    if cfg.db_path.exists() and foreign_owner(cfg.db_path) is None:
        _doctor_spaces(cfg, embedder.model_id, embedder.dim, results)


def _doctor_spaces(cfg: Config, model_id: str, dim: int, results: list[dict[str, object]]) -> None:
    """Warn when memories or document chunks lack a vector of the active embedder."""
    from agentd.db import DatabaseError, open_sync
    from agentd.knowledge.store import chunk_vector_counts
    from agentd.memory.store import vector_status

    try:
        conn = open_sync(cfg.db_path)
        try:
            memories = vector_status(conn, model_id, dim)
            chunks, chunks_current = chunk_vector_counts(conn, model_id, dim)
        finally:
            conn.close()
    except DatabaseError:
        return  # the database check already says what is wrong
    stale = memories.total - memories.current
    _check(
        "memory vectors",
        True,
        f"{stale} of {memories.total} memories lack a {model_id} vector: run "
        "`agentd memory reindex`"
        if stale
        else f"{memories.total} memories, all current",
        results,
        warn=bool(stale),
    )
    stale = chunks - chunks_current
    _check(
        "document vectors",
        True,
        f"{stale} of {chunks} document chunks lack a {model_id} vector: run `agentd docs reindex`"
        if stale
        else f"{chunks} chunks, all current",
        results,
        warn=bool(stale),
    )


def _doctor_skills(cfg: Config, results: list[dict[str, object]]) -> None:
    """Skills that are invalid or changed are named with the reason; the rest are counted."""
    from agentd.cli.skills import recorded
    from agentd.skills.catalog import scan_config
    from agentd.skills.overview import overview

    # Another user's database is not opened as root (_doctor_database says so): no records.
    foreign = cfg.db_path.exists() and foreign_owner(cfg.db_path) is not None
    states = overview(scan_config(cfg), {} if foreign else recorded(cfg))
    enabled = sum(s.state == "enabled" for s in states)
    where = ", ".join(map(str, cfg.skill_dirs))
    _check("skills", True, f"{enabled} enabled of {len(states)} in {where}", results)
    for s in states:
        if s.state == "invalid":
            _check(f"skill {s.name}", False, f"{s.path} is not a usable skill: {s.reason}", results)
        elif s.state in ("changed", "missing"):
            _check(
                f"skill {s.name}",
                True,
                f"held back: {s.reason}; check it, then run `agentd skills enable {s.name}`",
                results,
                warn=True,
            )


def _doctor_telegram(cfg: Config, results: list[dict[str, object]]) -> None:
    token = cfg.secrets.telegram_bot_token
    if token is None:
        _check(
            "telegram",
            False,
            "TELEGRAM_BOT_TOKEN is not set (get one from @BotFather)" + _unreadable_secrets(cfg),
            results,
        )
        return
    base = cfg.telegram.api_base.rstrip("/")
    try:
        status, body = _http_json(f"{base}/bot{token.get_secret_value()}/getMe", {})
    except (OSError, ValueError) as exc:
        _check("telegram", False, f"{base} unreachable: {type(exc).__name__}", results)
        return
    if status == 200 and isinstance(body, dict) and body.get("ok"):
        _check("telegram", True, f"bot @{body['result'].get('username')} answers", results)
    else:
        _check("telegram", False, f"getMe answered HTTP {status}: check the token", results)


def _unreadable_secrets(cfg: Config) -> str:
    """Why a secret is missing when the secrets file is there but this user cannot read it
    (root's, read by systemd for the service): say so instead of 'not set'."""
    from agentd.config import SECRETS_FILE

    if not cfg.source:
        return ""
    path = Path(cfg.source).parent / SECRETS_FILE
    if path.exists() and not os.access(path, os.R_OK):
        return (
            f"; {path} exists but this user cannot read it (systemd reads it as root for "
            "the service), so the secrets were not checked: `sudo systemctl status agentd` "
            "shows whether the service got them"
        )
    return ""


def _doctor_allowlist(cfg: Config, results: list[dict[str, object]]) -> None:
    users = cfg.telegram.allowed_user_ids
    if users:
        _check("allowlist", True, f"{len(users)} user(s) served", results)
    else:
        _check(
            "allowlist",
            False,
            "telegram.allowed_user_ids is empty: nobody is served; add your Telegram user id to it",
            results,
        )
    trust = owners.resolve(cfg.telegram)
    # An owner taken from the allowlist works, but is worth saying: it decides who approves.
    _check("owner", True, trust.describe(), results, warn=trust.how != "configured")


def _doctor_anthropic(cfg: Config, results: list[dict[str, object]]) -> None:
    key = cfg.secrets.anthropic_api_key
    if key is None:
        _check(
            "anthropic", False, "ANTHROPIC_API_KEY is not set" + _unreadable_secrets(cfg), results
        )
        return
    base = (cfg.llm.base_url or "https://api.anthropic.com").rstrip("/")
    headers = {"x-api-key": key.get_secret_value(), "anthropic-version": "2023-06-01"}
    try:
        status, _ = _http_json(f"{base}/v1/models", headers)
    except (OSError, ValueError) as exc:
        _check("anthropic", False, f"{base} unreachable: {type(exc).__name__}", results)
        return
    ok = status == 200
    detail = f"{base} answers" if ok else f"{base} answered HTTP {status}: check the API key"
    _check("anthropic", ok, detail, results)
    if ok:
        _doctor_model(cfg, base, headers, results)


def _doctor_model(
    cfg: Config, base: str, headers: dict[str, str], results: list[dict[str, object]]
) -> None:
    model = cfg.llm.model
    try:
        status, _ = _http_json(f"{base}/v1/models/{urllib.parse.quote(model, safe='')}", headers)
    except (OSError, ValueError) as exc:
        _check("model", False, f"could not look up {model}: {type(exc).__name__}", results)
        return
    if status == 200:
        _check("model", True, f"{model} is available", results)
    else:
        _check(
            "model",
            False,
            f"{model}: HTTP {status} from the models API; set llm.model "
            "to a model id your key can use (e.g. claude-haiku-4-5)",
            results,
        )
