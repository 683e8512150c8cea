"""`agentd init`: from nothing to a configured agent, with no user-id hunting.

Checks the bot token with getMe, pairs the owner (a one-time code they send to the bot, read
here with getUpdates before the daemon runs), checks the Anthropic key with a free models
call, takes the time zone from the system, then writes `agentd.toml` (only what differs from
the defaults) and `agentd.env` (the secrets, mode 0600), which `agentd run` and the systemd
unit (`EnvironmentFile=`) read. Plain HTTP (urllib): no aiogram, so it starts fast.
"""

from __future__ import annotations

import json as jsonlib
import os
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Annotated, Any

import typer

from agentd.access.pairing import ALPHABET
from agentd.cli.common import EXIT_CONFIG, err, fail, out
from agentd.config import AgentConfig, LLMConfig, TelegramConfig

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


def check_key(base_url: str, key: str, model: str) -> str | None:
    """None when the key works and the model exists, else what is wrong (a free call)."""
    base = (base_url or "https://api.anthropic.com").rstrip("/")
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    try:
        status, _ = _call(f"{base}/v1/models/{urllib.parse.quote(model, safe='')}", headers)
    except (OSError, ValueError) as exc:
        return f"{base} is unreachable ({type(exc).__name__})"
    if status in (401, 403):
        return "Anthropic rejected the key"
    if status == 404:
        return f"the model {model} does not exist for this key"
    return None if status == 200 else f"the models API answered HTTP {status}"


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
            fail("another program is reading this bot's updates (is `agentd run` running?); "
                 "stop it, or pair later with `agentd pair`")  # fmt: skip
        for update in (body or {}).get("result", []) if isinstance(body, dict) else []:
            offset = int(update["update_id"]) + 1
            message = update.get("message") or {}
            text = str(message.get("text") or "").strip().upper().replace("-", "")
            if (message.get("chat") or {}).get("type") == "private" and text.endswith(code):
                sender = message.get("from") or {}
                return int(sender["id"]), str(sender.get("username") or sender.get("first_name"))
        if status != 200:
            time.sleep(1)
    fail("nobody sent the code in time; run `agentd init` again (or `agentd pair` later)")


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
    lines = ["# Written by `agentd init`. Every other key, with its default: config.example.toml.",
             "# Secrets are not here: they are in agentd.env (mode 0600).", ""]  # fmt: skip
    if timezone != AgentConfig().timezone:
        lines += ["[agent]", f"timezone = {jsonlib.dumps(timezone)}", ""]
    # The owner approves every high-risk call, whoever of the people served asks.
    lines += ["[telegram]", f"owner_id = {owner}", f"allowed_user_ids = [{owner}]"]
    if api_base != TelegramConfig().api_base:
        lines.append(f"api_base = {jsonlib.dumps(api_base)}")
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
    """A systemd user unit running this install's `agentd run` with the files just written."""
    return f"""# Written by `agentd init --systemd` (system-wide: systemd/agentd.service).
[Unit]
Description=agentd personal AI agent (Telegram)
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
NotifyAccess=main
ExecStart={sys.executable} -m agentd run --config {config_path.resolve()}
WorkingDirectory={config_path.resolve().parent}
EnvironmentFile={secrets_path.resolve()}
Restart=on-failure
RestartSec=5
RestartPreventExitStatus=78
WatchdogSec=60
UMask=0077

[Install]
WantedBy=default.target
"""


def install_user_unit(config_path: Path, secrets_path: Path, env: dict[str, str]) -> Path:
    home = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    unit = home / "systemd" / "user" / "agentd.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(user_unit(config_path, secrets_path))
    return unit


def _ask(label: str, given: str | None, interactive: bool, *, secret: bool = False) -> str:
    if given:
        return given
    if not interactive:
        fail(f"{label} is needed: pass it as an option or in the environment", EXIT_CONFIG)
    from rich.prompt import Prompt

    return Prompt.ask(label, password=secret, console=err).strip()


TokenOption = Annotated[
    str | None, typer.Option(envvar="TELEGRAM_BOT_TOKEN", help="Bot token from @BotFather.")
]
KeyOption = Annotated[str | None, typer.Option(envvar="ANTHROPIC_API_KEY", help="Anthropic key.")]


def init(
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the files.")] = Path(),
    token: TokenOption = None,
    anthropic_key: KeyOption = None,
    owner_id: Annotated[int | None, typer.Option(help="Skip pairing: this user id.")] = None,
    api_base: Annotated[str, typer.Option(help="Bot API server.")] = TelegramConfig().api_base,
    llm_base_url: Annotated[str, typer.Option(help="Anthropic API base URL.")] = "",
    model: Annotated[str, typer.Option(help="Model id.")] = LLMConfig().model,
    pair_timeout: Annotated[float, typer.Option(help="Seconds to wait for the code.")] = 600,
    non_interactive: Annotated[bool, typer.Option(help="Never prompt (for scripts).")] = False,
    force: Annotated[bool, typer.Option(help="Replace existing files without asking.")] = False,
    systemd: Annotated[
        bool, typer.Option("--systemd", help="Also install a systemd user unit.")
    ] = False,
) -> None:
    """Set up agentd: check the token and key, pair your account, write the config."""
    interactive = not non_interactive
    config_path, secrets_path = directory / "agentd.toml", directory / SECRETS_FILE
    existing = [p for p in (config_path, secrets_path) if p.exists()]
    if existing and not force:
        names = ", ".join(str(p) for p in existing)
        if not interactive:
            fail(f"{names} already exist; nothing changed (pass --force to replace them)")
        if not typer.confirm(f"{names} already exist. Replace them?", default=False, err=True):
            out.print("Nothing changed.")
            raise typer.Exit(0)

    bot = None
    while bot is None:
        token = _ask("Bot token from @BotFather", token, interactive, secret=True)
        bot = check_token(api_base, token)
        if bot is None:
            if not interactive:
                fail("Telegram rejected the bot token; check it with @BotFather", EXIT_CONFIG)
            err.print("Telegram rejected that token; try again.")
            token = None
    out.print(f"Bot token ok: @{bot}", highlight=False)

    if owner_id is None:
        code = "".join(secrets.choice(ALPHABET) for _ in range(8))
        out.print(f"Now send this to @{bot} in Telegram:\n\n    /start {code[:4]}-{code[4:]}\n",
                  highlight=False)  # fmt: skip
        owner_id, name = wait_for_owner(api_base, token, code, pair_timeout)
        out.print(f"Paired: {name} (user id {owner_id})", highlight=False)

    problem = "unchecked"
    while problem is not None:
        anthropic_key = _ask("Anthropic API key", anthropic_key, interactive, secret=True)
        problem = check_key(llm_base_url, anthropic_key, model)
        if problem is not None:
            if not interactive:
                fail(f"{problem}; check ANTHROPIC_API_KEY and --model", EXIT_CONFIG)
            err.print(f"{problem}; try again.")
            anthropic_key = None
    out.print("Anthropic key ok")

    timezone = system_timezone(dict(os.environ))
    directory.mkdir(parents=True, exist_ok=True)
    config_path.write_text(render_config(owner_id, timezone, api_base, llm_base_url, model))
    write_private(secrets_path, f"TELEGRAM_BOT_TOKEN={token}\nANTHROPIC_API_KEY={anthropic_key}\n")
    out.print(f"Wrote {config_path} (time zone {timezone}) and {secrets_path} (mode 0600).",
              highlight=False)  # fmt: skip
    if systemd:
        unit = install_user_unit(config_path, secrets_path, dict(os.environ))
        out.print(f"Installed {unit}. Start it (and at every boot) with:\n\n"
                  "    systemctl --user daemon-reload\n"
                  "    systemctl --user enable --now agentd\n\n"
                  "(`loginctl enable-linger` keeps it running when you are logged out.)",
                  highlight=False)  # fmt: skip
    else:
        out.print(f"Start the agent with:  agentd run --config {config_path}", highlight=False)
