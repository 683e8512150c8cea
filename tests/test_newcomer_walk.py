"""The README, walked on a clean clone: `agentd init` in a pseudo-terminal against a Bot API
and a Messages API without `GET /v1/models/{id}`, `agentd run`, a first answer in the chat,
and the service units checked by systemd's own tools. What a new owner does in their first
hour, so it stays working."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from tests.daemon_process import API_KEY, OWNER, REPO_ROOT, START_TIMEOUT, TOKEN
from tests.fakes import FakeAnthropic, FakeTelegram

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
NO_SYSTEMD_ANALYZE = "systemd-analyze is not installed here (apt-get install systemd)"
HOST_UNITS = next(
    (p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir()),
    None,
)

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (REPO_ROOT / ".git").exists(),
    reason="needs git and this repository's history, to clone it",
)


def clean_clone(tmp_path: Path) -> Path:
    """What a newcomer gets: the committed files, nothing built or left over in this tree."""
    repo = tmp_path / "agentd"
    subprocess.run(
        ["git", "clone", "--quiet", str(REPO_ROOT), str(repo)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return repo


def readme_commands(repo: Path) -> list[str]:
    """The shell lines of the README's code blocks, comments cut."""
    blocks = re.findall(r"```sh\n(.*?)```", (repo / "README.md").read_text(), re.S)
    lines = (line.split("#")[0].strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line]


def newcomer_env(repo: Path, home: Path) -> dict[str, str]:
    """A shell with nothing of agentd's set, running the clone's code (what `pip install .`
    in the clone would run; the dependencies are this interpreter's)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENTD_", "ANTHROPIC_", "TELEGRAM_", "XDG_"))
    }
    home.mkdir(parents=True, exist_ok=True)
    return {
        **env,
        "PYTHONPATH": str(repo),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "TZ": "Europe/Lisbon",
        "NO_COLOR": "1",
        "COLUMNS": "100",
        "PYTHONUNBUFFERED": "1",
    }


def init_in_a_terminal(repo: Path, env: dict[str, str], tg: FakeTelegram, llm_url: str) -> None:
    """`agentd init --systemd` (the README's set-up and its user unit), answered as a person
    would: the token, the code sent from Telegram, the key."""
    args = ["-m", "agentd", "init", "--systemd", "--api-base", tg.base_url]
    child = pexpect.spawn(
        sys.executable,
        [*args, "--llm-base-url", llm_url],
        cwd=str(repo),
        env=env,
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 100),
    )
    try:
        child.expect("Bot token")
        child.sendline(TOKEN)
        child.expect(r"/start ([A-Z0-9]{4}-[A-Z0-9]{4})")
        tg.add_message(OWNER, OWNER, f"/start {child.match.group(1)}")
        child.expect(rf"user id {OWNER}")
        child.expect("Anthropic API key")
        child.sendline(API_KEY)
        child.expect("Anthropic key ok")
        child.expect("systemctl --user enable --now agentd")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, child.before


def first_answer(repo: Path, env: dict[str, str], tg: FakeTelegram, log: Path) -> None:
    """`agentd run` in the clone, as the README says; the owner writes, the model answers."""
    # Test-only: the instant embedder (the default model is tested on its own) and a short
    # long-poll, so the stop at the end is quick.
    env = {**env, "AGENTD_MEMORY__EMBEDDER": "hashing", "AGENTD_TELEGRAM__POLL_TIMEOUT": "1"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentd", "run"], cwd=repo, env=env, stdout=out, stderr=out
        )
    try:
        tg.add_message(OWNER, OWNER, "hello, are you there?")
        try:
            tg.wait_until(
                lambda: any(
                    m["chat_id"] == OWNER and m["plain_text"] == "echo: hello, are you there?"
                    for m in tg.sent
                ),
                START_TIMEOUT,
                "the first answer in the owner's chat",
            )
        except TimeoutError as exc:
            raise AssertionError(f"{exc}:\n{log.read_text(errors='replace')}") from None
        assert proc.poll() is None, log.read_text(errors="replace")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def what_to_have_first(repo: Path) -> None:
    """The README says what to have before Install (a bot, a model, bubblewrap, the disk) and
    installs bubblewrap with the rest, all on its first screen."""
    readme = (repo / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 150, len(lines)  # the first screen: all of it
    before, install = readme.index("## Before you start"), readme.index("## Install")
    assert before < install
    first = readme[before:install]
    for needed in ("@BotFather", "Anthropic API key", "Messages API", "bubblewrap", "480 MB"):
        assert needed in first, needed
    assert "pip uninstall onnxruntime" in first  # how to go smaller
    apt = next(line for line in lines if "apt install" in line)
    assert "bubblewrap" in apt, apt


def nothing_left_to_commit(repo: Path) -> None:
    """What the set-up and a run create in the checkout (secrets, the database, the agent's
    files, skills, automations) is ignored: `git status` shows nothing to add."""
    for folder in ("workspace", "skills", "automations"):
        (repo / folder).mkdir(exist_ok=True)
        (repo / folder / "made-by-agentd.txt").write_text("x")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert status.stdout == "", status.stdout


def test_a_newcomer_walks_the_readme_on_a_clean_clone(tmp_path: Path) -> None:
    repo = clean_clone(tmp_path)
    what_to_have_first(repo)
    commands = readme_commands(repo)
    assert "agentd init" in commands and "agentd run" in commands, commands
    env = newcomer_env(repo, tmp_path / "home")
    where = subprocess.run(
        [sys.executable, "-c", "import agentd; print(agentd.__file__)"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(repo)), where  # the clone's code, not this tree's
    with (
        FakeTelegram.running(token=TOKEN) as tg,
        FakeAnthropic.running(api_key=API_KEY, model_route=False) as llm,
    ):
        init_in_a_terminal(repo, env, tg, llm.base_url)
        assert (repo / "agentd.toml").exists() and (repo / "agentd.env").exists()
        # git would not offer to commit the secrets written into the clone.
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True
        )
        assert "agentd.env" not in status.stdout, status.stdout
        first_answer(repo, env, tg, tmp_path / "run.log")
        nothing_left_to_commit(repo)
    unit = tmp_path / "home" / ".config" / "systemd" / "user" / "agentd.service"
    if SYSTEMD_ANALYZE is not None:
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        verify = subprocess.run(
            [SYSTEMD_ANALYZE, "--user", "verify", "--man=no", str(unit)],
            env={**env, "XDG_RUNTIME_DIR": str(runtime)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason=NO_SYSTEMD_ANALYZE)
@pytest.mark.skipif(HOST_UNITS is None, reason="no systemd unit directory to verify against")
def test_the_shipped_system_unit_passes_systemd_verify_and_security(tmp_path: Path) -> None:
    """The system unit from the clone, installed where docs/operations.md puts each part
    (the unit in /etc/systemd/system, agentd in /opt/agentd/.venv), in a root of its own."""
    assert SYSTEMD_ANALYZE is not None and HOST_UNITS is not None
    repo = clean_clone(tmp_path)
    root = tmp_path / "root"
    shutil.copytree(HOST_UNITS, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    unit = root / "etc" / "systemd" / "system" / "agentd.service"
    shutil.copy(repo / "systemd" / "agentd.service", unit)
    agentd = root / "opt" / "agentd" / ".venv" / "bin" / "agentd"
    agentd.parent.mkdir(parents=True)
    agentd.write_text(f'#!/bin/sh\nexec {sys.executable} -m agentd "$@"\n')
    agentd.chmod(0o755)
    verify = subprocess.run(
        [
            SYSTEMD_ANALYZE,
            "verify",
            f"--root={root}",
            "--man=no",
            "/etc/systemd/system/agentd.service",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stdout + verify.stderr
    security = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=yes", str(unit)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"Overall exposure level for agentd.service: ([0-9.]+)", security.stdout)
    assert found, security.stdout + security.stderr
    assert float(found[1]) <= 3.0, security.stdout  # what docs/operations.md promises
