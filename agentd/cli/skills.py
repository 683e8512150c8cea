"""`agentd skills`: add, enable, disable, remove, list and show Agent Skills (SKILL.md folders).

Only the owner enables a skill, here, after seeing what it holds: its files, its scripts and
the tools it asks for. agentd pins the content hash of every file; a skill whose files change
is held back until it is enabled again.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    clip,
    config_or_exit,
    database,
    err,
    fail,
    iso,
    new_table,
    out,
    print_json,
    print_table,
    transaction,
)
from agentd.config import Config

if TYPE_CHECKING:
    from agentd.skills.folder import SkillFolder
    from agentd.skills.store import SkillRecord

app = typer.Typer(help="Agent Skills: add, enable, disable, rm, ls, show.", no_args_is_help=True)
YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Confirm without asking (for scripts).")
]
SOURCE_HELP = "A skill folder, or an http(s) URL of a zip or tar archive or of a SKILL.md."
NameArg = Annotated[str, typer.Argument(help="The skill's name (see `agentd skills ls`).")]


@contextmanager
def _db(cfg: Config, *, write: bool) -> Iterator[Any]:
    """The daemon's database (migrated for a write); None for a read before it exists.

    Like every command, a write does not create it: the daemon does, as its own user, where
    storage.path says (a CLI run elsewhere or as root would make one the daemon cannot use).
    """
    if not write and not cfg.db_path.exists():
        yield None
        return
    with database(cfg, write=write) as conn:
        yield conn


def _db_exists_or_fail(cfg: Config) -> None:
    """Before anything is shown or copied: the enable at the end needs the database."""
    with _db(cfg, write=True):
        pass


def recorded(cfg: Config) -> dict[str, SkillRecord]:
    from agentd.skills.store import records

    with _db(cfg, write=False) as conn:
        if conn is None:
            return {}
        try:
            return records(conn)
        except Exception:  # a database from before skills: nothing recorded yet
            return {}


def _plain(text: object) -> str:
    """A skill's own text, safe to print: no terminal control or bidi codes (a description
    must not hide a line or draw a fake one on the owner's terminal)."""
    return "".join(
        ch if ch == "\n" or unicodedata.category(ch)[0] != "C" else f"\\u{ord(ch):04x}"
        for ch in str(text)
    )


def _shown(text: object) -> str:
    """The same, inside a line printed as markup: its brackets escaped."""
    from rich.markup import escape

    return escape(_plain(text))


def _describe(skill: SkillFolder, source: str) -> None:
    """What the owner is about to trust, on stderr (stdout stays for --json)."""
    m = skill.manifest
    say = partial(err.print, highlight=False, soft_wrap=True, markup=True)
    say(f"[bold]Skill {_shown(m.name)}[/] from {_shown(source)}")
    # The description is the one part of a skill that is in every prompt, unmarked as outside
    # content: shown exactly as the model will read it, so the owner can adopt it knowingly.
    from agentd.agent.prompt import prompt_line

    line = _shown(prompt_line(m.description))
    say(f"  description (in every conversation, as if you wrote it): {line}")
    for label, value in (("license", m.license), ("compatibility", m.compatibility)):
        if value:
            say(f"  {label}: {_shown(value)}")
    for key, value in {**m.metadata, **m.extra}.items():
        say(f"  {_shown(key)}: {_shown(value)}")
    say(f"  files ({len(skill.files)}):")
    for f in skill.files:
        mark = "  [yellow]script[/]" if f.script else ""
        say(f"    {_shown(f.path)}  {f.size:,} bytes{mark}")
    if skill.scripts:
        say(
            f"  [yellow]{len(skill.scripts)} script(s)[/]: they run only in the sandboxed "
            "shell, and only after you approve each run."
        )
    if m.allowed_tools:
        say(
            f"  asks for tools: {_shown(' '.join(m.allowed_tools))} (for information only: "
            "a skill never changes a tool's risk or skips an approval)"
        )
    for warning in skill.warnings:
        say(f"  [yellow]note:[/] {_shown(warning)}")
    say(f"  content hash: {skill.content_hash}")


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        fail("confirmation needed: run it in a terminal, or pass --yes")
    if not typer.confirm(question, default=False, err=True):
        fail("nothing changed")


def _read(path: Path, cfg: Config) -> SkillFolder:
    from agentd.skills.catalog import Invalid, check, limits_of

    found = check(path, limits_of(cfg))
    if isinstance(found, Invalid):
        fail(f"{_plain(path)} is not a usable skill: {_plain(found.reason)}")
    return found


def _install(skill: SkillFolder, cfg: Config) -> SkillFolder:
    """Copy the skill into the install folder (unless it is in a skill folder already).

    What is pinned is the path the daemon scans (`cfg.skill_dirs`, in the one canonical form
    of the path rule), whatever spelling the owner typed: else it is held back as "moved"."""
    dirs = cfg.skill_dirs
    here = skill.path.resolve()
    for folder in dirs:
        if here.parent == folder.resolve():
            return _read(folder / here.name, cfg)
    target = dirs[0] / skill.name
    if target.exists():
        fail(f"{target} exists already; remove it first (`agentd skills rm {skill.name}`)")
    dirs[0].mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{skill.name}-", dir=dirs[0]))
    try:
        shutil.copytree(skill.path, staging / "copy", symlinks=True)
        copied = _read(staging / "copy", cfg)
        if copied.content_hash != skill.content_hash:
            fail("the skill's files changed while it was being copied; run the command again")
        (staging / "copy").rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _read(target, cfg)


def _enable(skill: SkillFolder, source: str, cfg: Config) -> None:
    from agentd.skills.store import confirm

    with _db(cfg, write=True) as conn, transaction(conn):
        confirm(conn, skill, source, time.time())
    out.print(
        f"Enabled skill {skill.name} ({len(skill.files)} files, hash "
        f"{skill.content_hash[:12]}). The daemon offers it from the next message on.",
        highlight=False,
    )


@app.command("add")
def add(
    source: Annotated[str, typer.Argument(help=SOURCE_HELP)],
    skill: Annotated[
        str | None,
        typer.Option(
            "--skill", help="The skill folder to take from an archive that holds several."
        ),
    ] = None,
    yes: YesOption = False,
    config: ConfigOption = None,
) -> None:
    """Install a skill from a folder or URL after showing what it holds, and enable it."""
    cfg = config_or_exit(config)
    _db_exists_or_fail(cfg)
    with tempfile.TemporaryDirectory(prefix="agentd-skill-") as tmp:
        if source.startswith(("http://", "https://")):
            path = _download(source, cfg, Path(tmp), skill)
            where = source
        else:
            path = Path(source).expanduser()
            where = str(path.resolve())
        skill = _read(path, cfg)
        _describe(skill, where)
        _confirm(f"Enable skill {skill.name}?", yes)
        installed = _install(skill, cfg)
        if installed.content_hash != skill.content_hash:
            fail("the installed copy differs from what was shown; nothing enabled")
        _enable(installed, where, cfg)


def _download(url: str, cfg: Config, into: Path, pick: str | None) -> Path:
    import asyncio

    from agentd.net import FetchError
    from agentd.skills.remote import RemoteSkillError, download_skill

    try:
        return asyncio.run(download_skill(url, cfg, into, pick))
    except (FetchError, RemoteSkillError) as exc:
        fail(f"could not add {_plain(url)}: {_plain(exc)}")


def _found(name: str, cfg: Config) -> SkillFolder:
    from agentd.skills.catalog import scan_config

    catalog = scan_config(cfg)
    if name in catalog.skills:
        return catalog.skills[name]
    bad = next((i for i in catalog.invalid if i.path.name == name), None)
    if bad is not None:
        fail(f"{_plain(bad.path)} is not a usable skill: {_plain(bad.reason)}")
    fail(
        f"no skill named {name!r} in {', '.join(map(str, cfg.skill_dirs))}; see `agentd skills ls`"
    )


@app.command("enable")
def enable(name: NameArg, yes: YesOption = False, config: ConfigOption = None) -> None:
    """Enable a skill found in the skill folders (again, after its files changed)."""
    cfg = config_or_exit(config)
    _db_exists_or_fail(cfg)
    skill = _found(name, cfg)
    record = recorded(cfg).get(name)
    if record is not None and record.content_hash != skill.content_hash:
        err.print("[yellow]Its files changed since it was last enabled.[/]", markup=True)
    _describe(skill, str(skill.path))
    _confirm(f"Enable skill {name}?", yes)
    _enable(skill, record.source if record else str(skill.path), cfg)


@app.command("disable")
def disable(name: NameArg, config: ConfigOption = None) -> None:
    """Stop offering a skill to the model (its files stay)."""
    from agentd.skills.store import set_status

    cfg = config_or_exit(config)
    with _db(cfg, write=True) as conn, transaction(conn):
        if not set_status(conn, name, "disabled", time.time(), "disabled by the owner"):
            fail(f"skill {name!r} is not enabled")
    out.print(f"Disabled skill {name}.")


@app.command("rm")
def rm(name: NameArg, yes: YesOption = False, config: ConfigOption = None) -> None:
    """Disable a skill and delete its folder from the skill folders."""
    from agentd.skills.store import forget

    cfg = config_or_exit(config)
    record = recorded(cfg).get(name)
    from agentd.skills.catalog import scan_config

    found = scan_config(cfg).skills.get(name)
    if found is None and record is None:
        fail(f"no skill named {name!r}")
    folder = found.path if found else Path(record.path) if record else None
    inside = folder is not None and folder.resolve().parent in [d.resolve() for d in cfg.skill_dirs]
    _confirm(f"Remove skill {name}{f' and delete {folder}' if inside else ''}?", yes)
    with _db(cfg, write=True) as conn, transaction(conn):
        forget(conn, name, time.time())
    if inside and folder is not None and folder.exists():
        shutil.rmtree(folder)
    out.print(f"Removed skill {name}.")


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """Every skill in the skill folders: enabled, changed, not enabled or invalid (and why)."""
    from agentd.skills.catalog import scan_config
    from agentd.skills.overview import overview

    cfg = config_or_exit(config)
    states = overview(scan_config(cfg), recorded(cfg))
    if json:
        print_json([s.model_dump() for s in states])
        return
    if not states:
        out.print(
            f"No skills in {', '.join(map(str, cfg.skill_dirs))}. Add one with "
            "`agentd skills add PATH|URL`.",
            highlight=False,
        )
        return
    colour = {"enabled": "green", "changed": "yellow", "invalid": "red", "missing": "red"}
    from rich.table import Column
    from rich.text import Text

    table = new_table("name", "state", "scripts", Column("description", overflow="fold"), "reason")
    for s in states:
        state = Text(s.state, style=colour.get(s.state, ""))
        table.add_row(
            _plain(s.name), state, str(s.scripts), _plain(clip(s.description, 80)), _plain(s.reason)
        )
    print_table(table)


@app.command("show")
def show(name: NameArg, json: JsonOption = False, config: ConfigOption = None) -> None:
    """A skill's front matter, files, scripts, state and instructions."""
    from agentd.skills.catalog import scan_config
    from agentd.skills.overview import overview

    cfg = config_or_exit(config)
    catalog = scan_config(cfg)
    records = recorded(cfg)
    state = next((s for s in overview(catalog, records) if s.name == name), None)
    if state is None:
        fail(f"no skill named {name!r}; see `agentd skills ls`")
    skill = catalog.skills.get(name)
    record = records.get(name)
    if json:
        print_json(
            {
                **state.model_dump(),
                "manifest": skill.manifest.model_dump() if skill else None,
                "files": [f.__dict__ for f in skill.files] if skill else [],
                "record": {**record.model_dump(), "confirmed_at": iso(record.confirmed_at)}
                if record
                else None,
            }
        )
        return
    why = f" ({_plain(state.reason)})" if state.reason else ""
    out.print(f"{_plain(name)}: {state.state}{why}", highlight=False)
    if skill is not None:
        _describe(skill, record.source if record else str(skill.path))
        out.print("\n" + _plain(skill.manifest.body), highlight=False)
