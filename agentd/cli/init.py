"""`agentd init`: from nothing to a configured agent, with no user-id hunting.

Checks the bot token with getMe, pairs the owner (a one-time code they send to the bot, read
here with getUpdates before the daemon runs), checks the key and the model with the cheapest
call the endpoint answers (model_check.py), takes the time zone from the system, then writes
`agentd.toml` (only what differs from the defaults) and `agentd.env` (the secrets, mode
0600), which `agentd run` reads beside the config (the user unit does not load it into the
environment, where every child process would inherit it). Telegram through
plain HTTP (urllib): no aiogram, so it starts fast.
"""

from __future__ import annotations

import json as jsonlib
import os
import secrets
import shlex
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from agentd.access.pairing import ALPHABET
from agentd.cli.common import EXIT_CONFIG, err, fail, out, working
from agentd.cli.model_check import (
    DEFAULT_BASE_URL,
    ModelProblem,
    check_model,
    other_models,
    refusal_advice,
)
from agentd.config import AgentConfig, LLMConfig
from agentd.ledger.pricing import Tokens
from agentd.telegram.config import TelegramConfig

SECRETS_FILE = "agentd.env"


def _call(url: str, headers: dict[str, str] | None = None, timeout: float = 20) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, jsonlib.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def check_token(api_base: str, token: str) -> str | None:
    """The bot's @username, or None when Telegram rejects the token."""
    try:
        status, body = _call(f"{api_base.rstrip('/')}/bot{token}/getMe")
    except (OSError, ValueError) as exc:
        fail(f"{api_base} is unreachable ({type(exc).__name__}); check the network or --api-base")
    if status == 200 and isinstance(body, dict) and body.get("ok"):
        return str(body["result"].get("username") or "")
    return None


KEY_ATTEMPTS = 3  # then init stops, instead of asking forever


def wait_for_owner(api_base: str, token: str, code: str, timeout: float) -> tuple[int, str]:
    """Read updates until someone sends `/start <code>` in a private chat: (user id, name)."""
    base = f"{api_base.rstrip('/')}/bot{token}"
    offset: int | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        query = {"timeout": "10", "allowed_updates": '["message"]'}
        if offset is not None:
            query["offset"] = str(offset)
        status, body = _call(f"{base}/getUpdates?{urllib.parse.urlencode(query)}", timeout=30)
        if status == 409:
            fail(
                "another program is reading this bot's updates (is `agentd run` running?); "
                "stop it, or pair later with `agentd pair`"
            )
        for update in (body or {}).get("result", []) if isinstance(body, dict) else []:
            offset = int(update["update_id"]) + 1
            message = update.get("message") or {}
            text = str(message.get("text") or "").strip().upper().replace("-", "")
            chat = message.get("chat") or {}
            if chat.get("type") != "private":
                continue
            if text.endswith(code):
                # Acknowledge it, so `agentd run` does not answer the pairing message again.
                confirm = urllib.parse.urlencode({"offset": offset, "timeout": 0})
                _call(f"{base}/getUpdates?{confirm}", timeout=10)
                sender = message.get("from") or {}
                _say(
                    base,
                    chat.get("id"),
                    "Paired. I will answer you here once agentd runs on the server.",
                )
                return int(sender["id"]), str(sender.get("username") or sender.get("first_name"))
            if text.startswith("/START"):  # a bare /start, or a mistyped code: say what to send
                _say(
                    base,
                    chat.get("id"),
                    "That is not the code agentd init shows: send "
                    "/start followed by the 8-character code from the terminal.",
                )
        if status != 200:
            time.sleep(1)
    fail("nobody sent the code in time; run `agentd init` again (or `agentd pair` later)")


def _say(base: str, chat_id: object, text: str) -> None:
    """Best effort: a reply during pairing, so the owner's /start is not met with silence."""
    if not isinstance(chat_id, int):
        return
    query = urllib.parse.urlencode({"chat_id": chat_id, "text": text})
    try:
        _call(f"{base}/sendMessage?{query}", timeout=10)
    except (OSError, ValueError):
        pass


def system_timezone(env: dict[str, str]) -> str:
    """The system's IANA zone: $TZ, /etc/timezone, or the /etc/localtime link; else UTC."""
    if env.get("TZ", "").strip(":"):
        return env["TZ"].strip(":")
    try:
        return Path("/etc/timezone").read_text().strip() or "UTC"
    except OSError:
        pass
    localtime = Path("/etc/localtime")
    if localtime.is_symlink() and "zoneinfo/" in str(localtime.resolve()):
        return str(localtime.resolve()).split("zoneinfo/", 1)[1]
    return "UTC"


def render_config(owner: int, timezone: str, api_base: str, llm_base: str, model: str) -> str:
    """agentd.toml with only the keys that differ from the defaults."""
    lines = [
        "# Written by `agentd init`. Every other key, with its default: config.example.toml.",
        "# Secrets are not here: they are in agentd.env (mode 0600).",
        "",
    ]
    if timezone != AgentConfig().timezone:
        lines += ["[agent]", f"timezone = {jsonlib.dumps(timezone)}", ""]
    # The owner approves every high-risk call, whoever of the people served asks.
    lines += ["[access]", f"owner_id = {owner}", f"allowed_user_ids = [{owner}]"]
    if api_base != TelegramConfig().api_base:
        lines += ["", "[telegram]", f"api_base = {jsonlib.dumps(api_base)}"]
    llm = []
    if model != LLMConfig().model:
        llm.append(f"model = {jsonlib.dumps(model)}")
    if llm_base:
        llm.append(f"base_url = {jsonlib.dumps(llm_base)}")
    if llm:
        lines += ["", "[llm]", *llm]
    return "\n".join(lines) + "\n"


def write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def user_unit(config_path: Path, secrets_path: Path) -> str:
    """A systemd user unit running this install's `agentd` with the files just written, under
    the system unit's hardening where a user manager can apply it."""
    entry = Path(sys.executable).parent / "agentd"
    command = str(entry) if entry.exists() else shutil.which("agentd") or "agentd"
    return f"""# Written by `agentd init --systemd` (system-wide: systemd/agentd.service).
[Unit]
Description=agentd personal AI agent (Telegram)
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
NotifyAccess=main
ExecStart={command} run --config {config_path.resolve()}
ExecReload={command} automations reload --config {config_path.resolve()}
WorkingDirectory={config_path.resolve().parent}
# agentd reads {secrets_path.resolve()} itself: no EnvironmentFile=, so the secrets
# stay out of the process environment (and of every command and plugin it starts).
Restart=on-failure
RestartSec=5
RestartPreventExitStatus=78
WatchdogSec=60
UMask=0077
# The system unit's hardening, but for its file-system options (ProtectSystem, PrivateTmp…):
# a user manager builds those in a user namespace of its own, where bubblewrap (the shell's
# sandbox) cannot make its own. Namespaces, mounts and a few privileged calls stay allowed for
# bubblewrap; see systemd/agentd.service for why each is needed.
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native
RestrictNamespaces=user mnt pid ipc uts net cgroup
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallFilter=@system-service @mount capset chroot pivot_root sethostname
SystemCallFilter=setuid setgid setresuid setresgid setgroups
SystemCallFilter=~@obsolete @swap @reboot @raw-io @clock @debug @cpu-emulation @module @chown
SystemCallErrorNumber=EPERM
MemoryMax=1G
MemoryHigh=768M
TasksMax=256

[Install]
WantedBy=default.target
"""


def install_user_unit(config_path: Path, secrets_path: Path, env: dict[str, str]) -> Path:
    home = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    unit = home / "systemd" / "user" / "agentd.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(user_unit(config_path, secrets_path))
    return unit


def _stored_secrets(path: Path) -> dict[str, str]:
    """What an earlier, interrupted `agentd init` saved, so a re-run need not ask again."""
    from agentd.config import ConfigError, read_secrets_file

    try:
        return read_secrets_file(path)
    except ConfigError:
        return {}


def _ask(label: str, given: str | None, interactive: bool, *, secret: bool = False) -> str:
    if given:
        return given
    if not interactive:
        fail(f"{label} is needed: pass it as an option or in the environment", EXIT_CONFIG)
    from rich.prompt import Prompt

    return Prompt.ask(label, password=secret, console=err).strip()


@dataclass
class Setup:
    """What the command line said, so a printed re-run can say it again."""

    directory: Path
    api_base: str
    llm_base_url: str
    model: str
    interactive: bool
    skip_model_check: bool
    systemd: bool

    @property
    def config_path(self) -> Path:
        return self.directory / "agentd.toml"

    @property
    def secrets_path(self) -> Path:
        return self.directory / SECRETS_FILE

    def finish_command(self, owner_id: int) -> str:
        """`agentd init` again with every choice made so far, pairing skipped: it runs as
        printed, from the same folder (the token is read back from agentd.env)."""
        words = [*program(), "init", "--dir", str(self.directory)]
        words += ["--owner-id", str(owner_id), "--force"]
        if self.api_base != TelegramConfig().api_base:
            words += ["--api-base", self.api_base]
        if self.llm_base_url:
            words += ["--llm-base-url", self.llm_base_url]
        if self.model != LLMConfig().model:
            words += ["--model", self.model]
        words += ["--skip-model-check"] * self.skip_model_check + ["--systemd"] * self.systemd
        words += ["--non-interactive"] * (not self.interactive)
        return shlex.join(words)


def program() -> list[str]:
    """How to call this agentd again: `agentd` when that is the one on PATH, else its path
    (a venv not activated, `sudo .venv/bin/agentd`), else `python -m agentd`."""
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name == "agentd":
        on_path = shutil.which("agentd")
        if on_path and Path(on_path).resolve() == Path(argv0).resolve():
            return ["agentd"]
        return [argv0]
    return [sys.executable, "-m", "agentd"]


def _checked_key(key: str | None, setup: Setup) -> tuple[str, str, Tokens | None]:
    """A key and a model that work together (asking for the key again while a new key can
    help, at most KEY_ATTEMPTS times, and for a model from the endpoint's list when it refused
    the one given), and what the check cost; a wrong base URL is said at once."""
    model, attempts = setup.model, 0
    while True:
        key = _ask("Anthropic API key", key, setup.interactive, secret=True)
        if setup.skip_model_check:
            out.print(
                f"Anthropic key and model {model} not checked (--skip-model-check)", markup=False
            )
            return key, model, None
        base = setup.llm_base_url or DEFAULT_BASE_URL
        try:
            with working(f"Checking the key and the model {model} at {base}"):
                found = check_model(setup.llm_base_url, key, model)
        except ModelProblem as problem:
            if problem.fault == "model" and setup.interactive and problem.listed:
                model = _choose_model(problem)
                continue
            attempts += 1
            _stop_unless_a_key_helps(problem, model, setup.interactive, attempts)
            err.print(f"{problem}; try again.", highlight=False, markup=False)
            key = None
            continue
        how = "listed by" if found.how == "listed" else "answered at"
        out.print(f"Anthropic key ok; model {model} {how} {base}", highlight=False, markup=False)
        if others := other_models(model, found.listed):
            out.print(
                f"It also lists: {', '.join(others)} ([llm] model in the config picks one).",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
        return key, model, found.spent


def _record_check(setup: Setup, model: str, spent: Tokens | None) -> None:
    """The one-token message's tokens, in the ledger of the database the written config names
    (made now when the daemon has not run yet: cli/check_usage.py)."""
    from agentd.channels import load_config
    from agentd.cli.check_usage import not_counted, record_checks
    from agentd.config import ConfigError

    if spent is None:
        return
    try:
        cfg = load_config(setup.config_path)
    except ConfigError as exc:  # the environment overrides what was written, wrongly
        err.print(not_counted(str(exc)), highlight=False, markup=False)
        return
    if note := record_checks(cfg, [(model, spent)]):
        err.print(note, highlight=False, markup=False)


def plain(text: str) -> str:
    """Text from outside (an endpoint's error, a model id, a folder) shown as it is: rich
    would take `[/v1/messages]` or `[Gmail]` for markup, drop it, or fail on it."""
    from rich.markup import escape

    return escape(text)


def _stop_unless_a_key_helps(
    problem: ModelProblem, model: str, interactive: bool, attempts: int
) -> None:
    if problem.fault == "model":
        fail(plain(refusal_advice(problem, model)), EXIT_CONFIG)
    if not problem.key_fault:
        fail(plain(str(problem)), EXIT_CONFIG)
    if not interactive:
        fail(plain(f"{problem}; check ANTHROPIC_API_KEY (or --anthropic-key)"), EXIT_CONFIG)
    if attempts == KEY_ATTEMPTS:
        fail(
            plain(
                f"{problem}, {KEY_ATTEMPTS} times; check the key at console.anthropic.com (or "
                "your endpoint's) and run `agentd init` again"
            ),
            EXIT_CONFIG,
        )


def _choose_model(problem: ModelProblem) -> str:
    """A numbered choice among the models the endpoint listed."""
    from rich.prompt import Prompt

    err.print(f"{problem}. The models it lists:", highlight=False, markup=False)
    for number, name in enumerate(problem.listed, 1):
        err.print(f"  {number}. {name}", highlight=False, markup=False)
    numbers = [str(n) for n in range(1, len(problem.listed) + 1)]
    choice = Prompt.ask("Model number", choices=numbers, show_choices=False, console=err)
    return problem.listed[int(choice) - 1]


def _write(setup: Setup, owner_id: int, token: str, key: str, model: str) -> str:
    """Write agentd.toml and agentd.env; return the time zone written."""
    timezone = system_timezone(dict(os.environ))
    setup.directory.mkdir(parents=True, exist_ok=True)
    config = render_config(owner_id, timezone, setup.api_base, setup.llm_base_url, model)
    setup.config_path.write_text(config)
    secrets = f"TELEGRAM_BOT_TOKEN={token}\n" + (f"ANTHROPIC_API_KEY={key}\n" if key else "")
    write_private(setup.secrets_path, secrets)
    return timezone


TokenOption = Annotated[
    str | None, typer.Option(envvar="TELEGRAM_BOT_TOKEN", help="Bot token from @BotFather.")
]
KeyOption = Annotated[str | None, typer.Option(envvar="ANTHROPIC_API_KEY", help="Anthropic key.")]
TELEGRAM_API_BASE = TelegramConfig().api_base
ApiBaseOption = Annotated[
    str, typer.Option(help=f"Bot API server (default {TELEGRAM_API_BASE}).", show_default=False)
]
LlmBaseOption = Annotated[
    str,
    typer.Option(
        help="Messages API base URL: Anthropic's, a proxy's or a compatible server's (the URL "
        "before /v1/messages).",
        show_default=False,
    ),
]
SkipCheckOption = Annotated[
    bool,
    typer.Option(
        "--skip-model-check",
        help="Write the key and model without calling the endpoint (one init cannot reach "
        "yet, or that bills even a one-token check).",
    ),
]


def init(
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the files.")] = Path(),
    token: TokenOption = None,
    anthropic_key: KeyOption = None,
    owner_id: Annotated[int | None, typer.Option(help="Skip pairing: this user id.")] = None,
    api_base: ApiBaseOption = TELEGRAM_API_BASE,
    llm_base_url: LlmBaseOption = "",
    model: Annotated[str, typer.Option(help="Model id.")] = LLMConfig().model,
    skip_model_check: SkipCheckOption = False,
    pair_timeout: Annotated[float, typer.Option(help="Seconds to wait for the code.")] = 600,
    non_interactive: Annotated[
        bool, typer.Option("--non-interactive", help="Never prompt (for scripts).")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace existing files without asking.")
    ] = False,
    systemd: Annotated[
        bool, typer.Option("--systemd", help="Also install a systemd user unit.")
    ] = False,
    add_mail: Annotated[
        bool, typer.Option("--add-mail", help="Only add a mail account to the files in --dir.")
    ] = False,
    add_calendar: Annotated[
        bool, typer.Option("--add-calendar", help="Only add a calendar to the files in --dir.")
    ] = False,
) -> None:
    """Set up agentd: check the token, key and model, pair your account, write the config."""
    setup = Setup(
        directory, api_base, llm_base_url, model, not non_interactive, skip_model_check, systemd
    )
    if add_mail or add_calendar:
        _add_accounts(directory, setup.interactive, add_mail=add_mail, add_calendar=add_calendar)
        return
    _confirm_replace([setup.config_path, setup.secrets_path], setup.interactive, force)
    stored = _stored_secrets(setup.secrets_path)
    token = token or stored.get("TELEGRAM_BOT_TOKEN")
    anthropic_key = anthropic_key or stored.get("ANTHROPIC_API_KEY")
    paired_now = owner_id is None
    try:
        token, bot = _checked_token(token, api_base, setup.interactive)
        if owner_id is None:
            owner_id = _pair(api_base, token, bot, pair_timeout)
    except (KeyboardInterrupt, EOFError):
        err.print(
            "\nStopped before pairing: nothing was written. Run `agentd init` again to start "
            "over (a new code is shown; the old one no longer pairs).",
            highlight=False,
            markup=False,
        )
        raise typer.Exit(130) from None
    try:
        anthropic_key, model, spent = _checked_key(anthropic_key, setup)
    except (KeyboardInterrupt, EOFError, typer.Exit) as stop:
        if not paired_now:
            raise
        _keep_pairing(setup, owner_id, token)
        raise typer.Exit(stop.exit_code if isinstance(stop, typer.Exit) else 130) from None
    timezone = _write(setup, owner_id, token, anthropic_key, model)
    _record_check(setup, model, spent)
    out.print(
        f"Wrote {setup.config_path} (time zone {timezone}) and {setup.secrets_path} (mode 0600).",
        highlight=False,
    )
    _next_steps(setup.config_path, setup.secrets_path, systemd)


def _pair(api_base: str, token: str, bot: str, timeout: float) -> int:
    code = "".join(secrets.choice(ALPHABET) for _ in range(8))
    out.print(
        f"Now send this to @{bot} in Telegram:\n\n    /start {code[:4]}-{code[4:]}\n",
        highlight=False,
    )
    with working("Waiting for that message (Ctrl-C stops)"):
        owner_id, name = wait_for_owner(api_base, token, code, timeout)
    out.print(f"Paired: {name} (user id {owner_id})", highlight=False)
    return owner_id


def _keep_pairing(setup: Setup, owner_id: int, token: str) -> None:
    """Write what is done, so a re-run with --owner-id skips the pairing (and reads the token
    back from agentd.env), and print that re-run, complete."""
    _write(setup, owner_id, token, "", setup.model)
    needs_key = "" if setup.interactive else " (with ANTHROPIC_API_KEY set)"
    err.print(
        f"\nThe Anthropic key was not saved. Kept the pairing (user id {owner_id}) in "
        f"{setup.config_path} and the bot token in {setup.secrets_path}; finish with"
        f"{needs_key}:\n\n    {setup.finish_command(owner_id)}\n",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def _add_accounts(
    directory: Path, interactive: bool, *, add_mail: bool, add_calendar: bool
) -> None:
    from agentd.cli import init_accounts

    if not interactive:
        fail(
            "--add-mail and --add-calendar ask questions; add [[mail]] / [[calendar]] to "
            "the config by hand instead (config.example.toml)"
        )
    if add_mail:
        init_accounts.add_mail(directory)
    if add_calendar:
        init_accounts.add_calendar(directory, system_timezone(dict(os.environ)))


def _confirm_replace(paths: list[Path], interactive: bool, force: bool) -> None:
    existing = [p for p in paths if p.exists()]
    if not existing or force:
        return
    names = ", ".join(str(p) for p in existing)
    if not interactive:
        fail(f"{names} already exist; nothing changed (pass --force to replace them)")
    if not typer.confirm(f"{names} already exist. Replace them?", default=False, err=True):
        out.print("Nothing changed.")
        raise typer.Exit(0)


def _checked_token(token: str | None, api_base: str, interactive: bool) -> tuple[str, str]:
    """A token Telegram accepts, asked for until it does (once, off a terminal); and the bot."""
    bot = None
    while bot is None:
        token = _ask("Bot token from @BotFather", token, interactive, secret=True)
        with working("Asking Telegram about the token"):
            bot = check_token(api_base, token)
        if bot is None:
            if not interactive:
                fail("Telegram rejected the bot token; check it with @BotFather", EXIT_CONFIG)
            err.print("Telegram rejected that token; try again.")
            token = None
    out.print(f"Bot token ok: @{bot}", highlight=False)
    return token, bot


def _next_steps(config_path: Path, secrets_path: Path, systemd: bool) -> None:
    """How to start it, as a command that runs as printed."""
    if systemd:
        unit = install_user_unit(config_path, secrets_path, dict(os.environ))
        out.print(
            f"Installed {unit}. Start it (and at every boot) with:\n\n"
            "    systemctl --user daemon-reload\n"
            "    systemctl --user enable --now agentd\n\n"
            "(`loginctl enable-linger` keeps it running when you are logged out.)",
            highlight=False,
        )
    else:
        run = shlex.join([*program(), "run", "--config", str(config_path)])
        out.print(f"Start the agent with:  {run}", highlight=False, markup=False, soft_wrap=True)
    out.print(
        "Mail and calendar (optional): agentd init --add-mail / --add-calendar", highlight=False
    )
