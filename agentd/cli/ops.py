"""Operations: `agentd usage` (R-AUD-2), `agentd backup` and `agentd doctor` (R-OPS-2, R-OPS-3)."""

from __future__ import annotations

import json as jsonlib
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentd.access import owners
from agentd.cli.common import (
    EXIT_CONFIG,
    NO_CONFIG,
    ConfigOption,
    JsonOption,
    config_missing,
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
    working,
)
from agentd.config import Config, ConfigError

if TYPE_CHECKING:
    from agentd.cli.check_usage import Spent


def usage(
    days: Annotated[int, typer.Option(help="How many days back.", min=1)] = 30,
    schedule: Annotated[
        str | None,
        typer.Option(
            help="Only the runs of this schedule: its id, or the start of ids (briefing: "
            "every briefing, daily and once)."
        ),
    ] = None,
    by_model: Annotated[
        bool, typer.Option("--by-model", help="Per model: calls, cost, fallback answers.")
    ] = False,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Tokens, prompt-cache hits, estimated cost and saving, vision-cache hits per day and chat."""
    from agentd.ledger.pricing import PRICES_AS_OF
    from agentd.ledger.usage import report, totals, vision_counts
    from agentd.llm.pricing import price_table

    cfg = config_or_exit(config)
    # A schedule's runs are instances sched-<id>-<due> and their turns (…-turn).
    prefix = f"sched-{schedule}-" if schedule else None
    since = time.time() - days * 86400
    with database(cfg) as conn:
        if schedule and not _schedule_known(conn, schedule):
            fail(
                f"no schedule or watch has the id {schedule} or an id starting {schedule}-; "
                "`agentd schedule ls` and `agentd watch ls` show the ids"
            )
        found = totals(conn, since=since, instance_prefix=prefix)
        vision = None if schedule else vision_counts(conn, since=since)
        rows = report(found, price_table(cfg.llm), vision)
        fallbacks = _fallback_answers(conn, since)
        checks = _watch_checks(conn, schedule, since) if schedule else ""
    models = _per_model(cfg, found, fallbacks)
    if json:
        print_json(models if by_model else [r.model_dump() for r in rows])
        return
    if by_model:
        _print_models(models, days)
        return
    _print_days(rows, days)
    if len(models) > 1 or any(m["fallback_answers"] for m in models):
        _print_models(models, days)
    if checks:
        out.print(checks, highlight=False)
    if rows:  # markup off: "[llm.prices]" is the config section, not a style
        err.print(
            f"Estimates at list prices as of {PRICES_AS_OF} (override: [llm.prices]); "
            "saving = the same calls without prompt caching; vision cache = photos whose "
            "summary was reused / photos seen.",
            markup=False,
        )


def _print_days(rows: list[Any], days: int) -> None:
    """The per-day and per-chat table of `agentd usage`."""
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


def _schedule_known(conn: Any, schedule: str) -> bool:
    """Whether a schedule or watch (in any state: a cancelled one's calls still count) has
    this id or one it starts, as the runs' instance ids `sched-<id>-<due>` are matched."""
    start = f"{schedule}-"
    return any(
        conn.execute(
            f"SELECT 1 FROM {table} WHERE id = ? OR substr(id, 1, ?) = ? LIMIT 1",
            (schedule, len(start), start),
        ).fetchone()
        for table in ("schedules", "watches")
    )


def _watch_checks(conn: Any, watch_id: str, since: float) -> str:
    """A watch's checks in the period, in one line ("" when the id is no watch's)."""
    from agentd.watch import store

    if store.get_any(conn, watch_id) is None:
        return ""
    s = store.stats(conn, watch_id, since)
    return (
        f"watch {watch_id}: {s.checks} checks — {s.unchanged} unchanged (no model call), "
        f"{s.quiet} quiet, {s.told} told, {s.failed} failed, {s.capped} capped"
    )


def _fallback_answers(conn: Any, since: float) -> dict[str, int]:
    """Calls a fallback answered, per model, from the audit log's llm_fallback rows."""
    found = conn.execute(
        "SELECT json_extract(detail, '$.model'), COUNT(*) FROM audit "
        "WHERE kind = 'llm_fallback' AND at >= ? GROUP BY 1",
        (since,),
    ).fetchall()
    return {str(model): count for model, count in found}


def _per_model(cfg: Config, found: list[Any], fallbacks: dict[str, int]) -> list[dict[str, Any]]:
    """Calls and cost per model (`provider/model` for a configured provider), priced as its
    provider says (a local one at 0), with how many calls it answered as a fallback."""
    from agentd.config.models import ModelSettings
    from agentd.ledger.pricing import cost, price_for
    from agentd.llm.pricing import price_note, price_table

    settings, prices = ModelSettings.of(cfg.llm), price_table(cfg.llm)
    rows: dict[str, dict[str, Any]] = {}
    for r in found:
        row = rows.setdefault(r.model, {"model": r.model, "calls": 0, "estimated_cost_usd": 0.0})
        row["calls"] += r.calls
        row["estimated_cost_usd"] += cost(r, price_for(r.model, prices))
    for row in rows.values():
        row["estimated_cost_usd"] = round(row["estimated_cost_usd"], 6)
        row["price"] = price_note(row["model"], settings)
        row["fallback_answers"] = fallbacks.get(row["model"], 0)
    return sorted(rows.values(), key=lambda row: -row["calls"])


def _print_models(models: list[dict[str, Any]], days: int) -> None:
    table = new_table("model", "calls", "≈ USD", "price", "as\nfallback")
    for m in models:
        cost_usd = f"{m['estimated_cost_usd']:.4f}"
        table.add_row(m["model"], str(m["calls"]), cost_usd, m["price"], str(m["fallback_answers"]))
    print_table(table, drop=("price",), empty=f"No model calls in the last {days} days.")


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
    """Check config, database, sqlite-vec, the chat channels, the model, mail and calendar."""
    from agentd.channels import load_config  # every channel's section, validated by its model

    results: list[dict[str, object]] = []
    try:
        cfg: Config | None = load_config(config)
        if cfg.source:
            _check("config", True, cfg.source, results)
        elif config_missing(cfg):
            _check("config", False, NO_CONFIG, results)
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
    missing = cfg is not None and config_missing(cfg)
    _show_results(results, 0, json)
    if cfg is not None:
        steps: list[tuple[str, Callable[[Config, list[dict[str, object]]], None]]] = []
        if not missing:  # "agentd.db will be created" here would be the wrong folder's
            steps.append(("Checking the database and the embedder", _doctor_database))
        steps += [
            ("Asking each chat network about the bot", _doctor_channels),
            ("Checking who is allowed", _doctor_allowlist),
        ]
        if _uses_claude(cfg):
            steps.append(("Checking the Anthropic key", _doctor_anthropic))
        steps += [
            ("Trying each configured model", _doctor_models),
            ("Checking mail, calendar, the sandbox and the rest", _doctor_capabilities),
        ]
        for what, step in steps:
            shown = len(results)
            with working(what, quiet=json):  # each can take seconds: say so, print as it goes
                step(cfg, results)
            _show_results(results, shown, json)
    if json:
        print_json(results)
    if cfg is None or missing:
        raise typer.Exit(EXIT_CONFIG)
    if not all(r["ok"] for r in results):
        raise typer.Exit(1)


def _show_results(results: list[dict[str, object]], start: int, json: bool) -> None:
    """Print the checks from `start` on (a JSON run prints them all at the end)."""
    if json:
        return
    from rich.markup import escape

    for r in results[start:]:
        mark = "[red]FAIL[/]" if not r["ok"] else "[yellow]warn[/]" if r["warn"] else "[green]ok[/]"
        line = f"{mark}  {escape(str(r['check']))}: {escape(str(r['detail']))}"
        out.print(line, highlight=False, markup=True)


def _doctor_capabilities(cfg: Config, results: list[dict[str, object]]) -> None:
    """Each capability's own checks, from the list the daemon builds from."""
    from agentd.daemon.capabilities import capabilities
    from agentd.tools.capability import Probe

    probe = Probe(secrets=cfg.secret_source(), read=lambda fn: _read_quietly(cfg, fn))
    for cap in capabilities():
        for check in cap.checks(cfg, probe):
            _check(check.name, check.ok, check.detail, results, warn=check.warn)
    _doctor_short_secrets(cfg, results)


def _doctor_short_secrets(cfg: Config, results: list[dict[str, object]]) -> None:
    """The redactor leaves values too short to be told from words in the log: say so."""
    from agentd.daemon.startup import configured_secrets
    from agentd.runtime.redact import MIN_SECRET_LENGTH

    short = {s for s in configured_secrets(cfg) if len(s) < MIN_SECRET_LENGTH}
    if short:
        detail = (
            f"{len(short)} configured secret(s) shorter than {MIN_SECRET_LENGTH} characters, "
            "which the logs do not redact: use a longer password or key"
        )
        _check("secrets", True, detail, results, warn=True)


def _read_quietly(cfg: Config, fn: Callable[[Any], Any]) -> Any:
    """fn(conn) on the database; None when there is none yet, it is another user's (as root;
    the database check says so) or it cannot be opened (the database check says why)."""
    from agentd.db import DatabaseError, open_sync

    path = cfg.db_path
    if not path.exists() or foreign_owner(path) is not None:
        return None
    try:
        conn = open_sync(path)
    except DatabaseError:
        return None
    try:
        return fn(conn)
    finally:
        conn.close()


def _doctor_database(cfg: Config, results: list[dict[str, object]]) -> None:
    from agentd.channels import migrations
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
            todo = pending(conn, migrations())
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


def _doctor_channels(cfg: Config, results: list[dict[str, object]]) -> None:
    """Each configured channel's own checks (does the bot answer with this token)."""
    from agentd.channels import configured
    from agentd.tools.capability import Probe

    probe = Probe(secrets=cfg.secret_source(), read=lambda fn: _read_quietly(cfg, fn))
    for channel in configured(cfg):
        for check in channel.checks(cfg, probe):
            detail = check.detail
            if not check.ok and "is not set" in detail:
                detail += _unreadable_secrets(cfg)
            _check(check.name, check.ok, detail, results, warn=check.warn)


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
    users = cfg.access.allowed_user_ids
    if users:
        _check("allowlist", True, f"{len(users)} user(s) served", results)
    else:
        _check(
            "allowlist",
            False,
            "access.allowed_user_ids is empty: nobody is served; add your Telegram user id to it",
            results,
        )
    trust = owners.resolve(cfg.access)
    # An owner taken from the allowlist works, but is worth saying: it decides who approves.
    _check("owner", True, trust.describe(), results, warn=trust.how != "configured")


def _doctor_anthropic(cfg: Config, results: list[dict[str, object]]) -> None:
    key = cfg.secrets.anthropic_api_key
    if key is None:
        _check(
            "anthropic", False, "ANTHROPIC_API_KEY is not set" + _unreadable_secrets(cfg), results
        )
        return
    from agentd.cli.model_check import DEFAULT_BASE_URL, ModelProblem, check_model

    if "/" in cfg.llm.model:  # the chat's model is not Claude: the per-model checks cover it
        return

    base = (cfg.llm.base_url or DEFAULT_BASE_URL).rstrip("/")
    model = cfg.llm.model
    try:  # the check `agentd init` makes: the model list, or one tiny message without one
        found = check_model(base, key.get_secret_value(), model)
    except ModelProblem as problem:
        _doctor_model_problem(problem, results)
        return
    if found.spent is not None:
        _doctor_spent(cfg, [(model, found.spent)], results)
    _check("anthropic", True, f"{base} accepts the key", results)
    how = "listed" if found.how == "listed" else "answered a one-token message"
    _check("model", True, f"{model} is available ({how})", results)


def _doctor_model_problem(problem: Any, results: list[dict[str, object]]) -> None:
    """Which of the key, the base URL or the model to change, by its config name."""
    said = str(problem).replace(", or pass --skip-model-check to write the config unchecked", "")
    if problem.fault == "model":
        if problem.listed:
            fix = f"it lists: {', '.join(problem.listed)}; set llm.model to one of them"
        else:
            fix = "set llm.model to a model id this endpoint serves (its documentation names them)"
        _check("anthropic", True, "the key is accepted", results)
        _check("model", False, f"{said}; {fix}", results)
        return
    fix = {
        "key": "; set ANTHROPIC_API_KEY (environment or agentd.env) to a key it accepts",
        "base_url": " (llm.base_url in the config)",
    }.get(problem.fault, "")
    _check("anthropic", False, f"{said}{fix}", results)


def _uses_claude(cfg: Config) -> bool:
    """Whether any configured model is Claude through the built-in provider (its key)."""
    from agentd.config.models import ANTHROPIC, ModelSettings

    settings = ModelSettings.of(cfg.llm)
    llm = cfg.llm
    names = [llm.model, llm.background_model, *llm.fallbacks, *llm.models.values()]
    return any(settings.ref(n).provider == ANTHROPIC for n in names if n)


def _doctor_spent(cfg: Config, spent: Spent, results: list[dict[str, object]]) -> None:
    """The model checks' tokens, in the ledger; a warning when they could not be written."""
    from agentd.cli.check_usage import record_checks

    if note := record_checks(cfg, spent):
        _check("usage", True, note, results, warn=True)


def _doctor_models(cfg: Config, results: list[dict[str, object]]) -> None:
    """Every configured model tried with one tiny call; a failing one is named."""
    from agentd.cli.models import model_checks
    from agentd.llm.types import LLMError

    if _uses_claude(cfg) and cfg.secrets.anthropic_api_key is None:
        return  # the anthropic check already says the key is missing
    try:
        checks = model_checks(cfg)
    except LLMError as exc:
        _check("models", False, str(exc), results)
        return
    _doctor_spent(cfg, [(c.model, c.spent) for c in checks if c.spent is not None], results)
    for c in checks:
        used = ", ".join(c.purposes)
        if c.ok:
            _check(f"model {c.model}", True, f"answers ({c.seconds:g} s; {used})", results)
        else:
            _check(f"model {c.model}", False, f"{c.problem} (used for {used})", results)
