"""`agentd models`: every configured model, where it is used, its price and what it can do;
`--test` tries each with one tiny call. `agentd doctor` runs the same test (`model_checks`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from agentd.cli.common import (
    EXIT_CONFIG,
    ConfigOption,
    JsonOption,
    config_or_exit,
    err,
    fail,
    new_table,
    out,
    print_json,
    print_table,
)
from agentd.config.models import PURPOSES

if TYPE_CHECKING:
    from agentd.config import Config
    from agentd.llm.probe import ModelCheck


def _can(flag: bool | None) -> str:
    return "assumed" if flag is None else "yes" if flag else "no"


async def _checks(cfg: Config, test: bool) -> list[ModelCheck]:
    """Each model described (and tried, with `test`); raises LLMError for a missing key."""
    from agentd.config.models import ModelSettings
    from agentd.llm import create_llm
    from agentd.llm.probe import describe, probe

    settings = ModelSettings.of(cfg.llm)
    llm = create_llm(cfg, settings)
    try:
        return await probe(llm, settings) if test else describe(llm, settings)
    finally:
        await llm.close()


def model_checks(cfg: Config) -> list[ModelCheck]:
    return asyncio.run(_checks(cfg, test=True))


def models(
    test: Annotated[
        bool, typer.Option("--test", help="Try each model with one tiny call (a few tokens).")
    ] = False,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """The configured models: where each is used, its price, tools and images; --test tries them."""
    from agentd.llm.types import LLMError

    cfg = config_or_exit(config)
    try:
        checks = asyncio.run(_checks(cfg, test))
    except LLMError as exc:
        fail(str(exc), EXIT_CONFIG)
    if test:
        _record(cfg, checks)
    if json:
        print_json([c.model_dump() for c in checks])
    else:
        _print(checks, test)
    if test and not all(c.ok for c in checks):
        raise typer.Exit(1)


def _record(cfg: Config, checks: list[ModelCheck]) -> None:
    """The tries' tokens, in the ledger (said on stderr when they could not be written)."""
    from agentd.cli.check_usage import record_checks

    if note := record_checks(cfg, [(c.model, c.spent) for c in checks if c.spent is not None]):
        err.print(note, highlight=False, markup=False)


def _print(checks: list[ModelCheck], test: bool) -> None:
    columns = ["model", "used for", "price", "tools", "images"]
    table = new_table(*columns, *(["test"] if test else []))
    for c in checks:
        used = "every purpose" if set(c.purposes) >= set(PURPOSES) else ", ".join(c.purposes)
        row = [c.model, used, c.price, _can(c.tools), _can(c.images)]
        if test:
            row.append(f"ok, {c.seconds:g} s" if c.ok else f"FAIL: {c.problem}")
        table.add_row(*row)
    print_table(table, drop=("images", "tools"), empty="No model is configured.")
    if not test:
        out.print("Try each with one tiny call: agentd models --test", highlight=False)
