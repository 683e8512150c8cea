"""`agentd init` against endpoints that are not Anthropic's own API: a proxy without
`GET /v1/models/{id}`, a compatible server with no model list at all, one that refuses the
model. The check takes the cheapest call each answers, never suggests a model it refused,
and the command it prints to finish runs as printed."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from typer.testing import CliRunner

from agentd.channels import load_config
from agentd.cli.model_check import ModelProblem, check_model
from tests.daemon_process import API_KEY, OWNER, TOKEN
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.test_init import AGENTD, clean_env

LISTED = "claude-haiku-4-5, claude-sonnet-4-5, claude-opus-4-1"
BIN = Path(sys.executable).parent  # the venv's `agentd` script, as an owner calls it


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram.running(token=TOKEN) as fake:
        yield fake


def init_args(tmp_path: Path, tg: FakeTelegram, llm: FakeAnthropic, *more: str) -> list[str]:
    return [
        "init",
        "--non-interactive",
        "--dir",
        str(tmp_path),
        "--owner-id",
        str(OWNER),
        "--api-base",
        tg.base_url,
        "--llm-base-url",
        llm.base_url,
        *more,
    ]


def run_init(args: list[str], key: str = API_KEY) -> subprocess.CompletedProcess[str]:
    env = clean_env(TELEGRAM_BOT_TOKEN=TOKEN, ANTHROPIC_API_KEY=key)
    return subprocess.run([*AGENTD, *args], env=env, capture_output=True, text=True, timeout=90)


def test_a_proxy_without_the_model_route_is_checked_with_the_list(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    with FakeAnthropic.running(api_key=API_KEY, model_route=False) as llm:
        done = run_init(init_args(tmp_path, tg, llm, "--model", "claude-sonnet-4-5"))
        assert done.returncode == 0, done.stderr
        assert "model claude-sonnet-4-5 listed by" in done.stdout
        assert "It also lists: claude-haiku-4-5, claude-opus-4-1" in done.stdout
        assert "([llm] model in the config picks one)" in done.stdout  # not eaten as markup
        assert llm.requests == []  # the free list was enough: no message spent
    assert load_config(tmp_path / "agentd.toml", env={}).llm.model == "claude-sonnet-4-5"


def test_a_server_with_only_messages_is_checked_with_one_token(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    with FakeAnthropic.running(api_key=API_KEY, models_list=False, model_route=False) as llm:
        done = run_init(init_args(tmp_path, tg, llm))
        assert done.returncode == 0, done.stderr
        assert "answered at" in done.stdout
        (sent,) = llm.requests
        assert sent["path"] == "/v1/messages" and sent["body"]["max_tokens"] == 1
        wrong = run_init(init_args(tmp_path, tg, llm, "--force"), key="sk-ant-wrong")
    assert wrong.returncode == 78 and "rejected the key" in wrong.stderr, wrong.stderr


def test_the_one_token_message_is_in_the_ledger(tmp_path: Path, tg: FakeTelegram) -> None:
    """The message is paid for: `agentd usage` shows it (purpose "check", no chat), in the
    database the written config names, made now when the daemon has not run yet."""
    from tests.docs_support import open_store

    with FakeAnthropic.running(api_key=API_KEY, models_list=False, model_route=False) as llm:
        done = run_init(init_args(tmp_path, tg, llm))
    assert done.returncode == 0, done.stderr
    assert "not in `agentd usage`" not in done.stderr, done.stderr
    conn = open_store(tmp_path / "agentd.db")
    rows = conn.execute(
        "SELECT model, chat_id, input_tokens, output_tokens FROM llm_usage WHERE purpose = 'check'"
    ).fetchall()
    conn.close()
    assert [tuple(r)[:2] for r in rows] == [("claude-haiku-4-5", None)]
    assert rows[0][2] > 0 and rows[0][3] > 0


def test_a_refused_model_is_told_with_the_list_never_a_guess(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    with FakeAnthropic.running(api_key=API_KEY, refuse_unknown_models=True) as llm:
        done = run_init(init_args(tmp_path, tg, llm, "--model", "claude-nope"))
    error = " ".join(done.stderr.split())
    assert done.returncode == 78, done.stderr
    assert "refused the model claude-nope" in error and f"it lists: {LISTED}" in error
    assert "--model" in error and "e.g." not in error
    assert not (tmp_path / "agentd.toml").exists()
    with FakeAnthropic.running(
        api_key=API_KEY, models_list=False, model_route=False, refuse_unknown_models=True
    ) as llm:
        done = run_init(init_args(tmp_path, tg, llm, "--model", "claude-nope"))
    error = " ".join(done.stderr.split())
    assert done.returncode == 78 and "listed no other model" in error, done.stderr
    assert "claude-haiku-4-5" not in error  # nothing listed, so nothing suggested


def test_skip_model_check_writes_without_calling(tmp_path: Path, tg: FakeTelegram) -> None:
    with FakeAnthropic.running(api_key=API_KEY, refuse_unknown_models=True) as llm:
        args = init_args(tmp_path, tg, llm, "--model", "my-gateway-model", "--skip-model-check")
        done = run_init(args)
        assert llm.requests == []
    assert done.returncode == 0 and "not checked" in done.stdout, done.stderr
    assert load_config(tmp_path / "agentd.toml", env={}).llm.model == "my-gateway-model"


def test_in_a_terminal_a_refused_model_is_a_numbered_choice(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    with FakeAnthropic.running(
        api_key=API_KEY, model_route=False, refuse_unknown_models=True
    ) as llm:
        args = init_args(tmp_path, tg, llm, "--model", "claude-nope")
        args.remove("--non-interactive")
        child = pexpect.spawn(
            str(BIN / "agentd"),
            args,
            env=clean_env(TELEGRAM_BOT_TOKEN=TOKEN, ANTHROPIC_API_KEY=API_KEY),
            encoding="utf-8",
            timeout=90,
            dimensions=(40, 100),
        )
        try:
            child.expect("refused the model claude-nope")
            child.expect(r"2\. claude-sonnet-4-5")
            child.expect("Model number")
            child.sendline("9")  # not on the list: asked again
            child.expect("Model number")
            child.sendline("2")
            child.expect("model claude-sonnet-4-5 listed by")
            child.expect(pexpect.EOF)
        finally:
            child.close()
    assert child.exitstatus == 0
    assert load_config(tmp_path / "agentd.toml", env={}).llm.model == "claude-sonnet-4-5"


def test_the_finish_command_keeps_every_flag_and_runs_as_printed(
    tmp_path: Path, tg: FakeTelegram
) -> None:
    """Pairing done, then the key refused: the command printed to finish runs, as printed,
    against the same endpoints (no --llm-base-url dropped)."""
    folder = tmp_path / "my agent"  # a space: the command must quote it
    with FakeAnthropic.running(api_key=API_KEY, models_list=False, model_route=False) as llm:
        args = init_args(folder, tg, llm, "--model", "claude-sonnet-4-5")
        owner = args.index("--owner-id")
        del args[owner : owner + 2]  # pair this time
        env = clean_env(
            TELEGRAM_BOT_TOKEN=TOKEN, ANTHROPIC_API_KEY="sk-ant-wrong", PATH=f"{BIN}:/usr/bin:/bin"
        )
        child = pexpect.spawn(
            str(BIN / "agentd"), args, env=env, encoding="utf-8", timeout=90, dimensions=(40, 100)
        )
        try:
            child.expect(r"/start ([A-Z0-9]{4}-[A-Z0-9]{4})")
            tg.add_message(OWNER, OWNER, f"/start {child.match.group(1)}")
            child.expect("rejected the key")
            child.expect(r"finish with[^:]*:\s+(agentd init [^\r\n]+)\r?\n")
            command = child.match.group(1)
            child.expect(pexpect.EOF)
        finally:
            child.close()
        assert child.exitstatus == 78
        for flag in ("--llm-base-url", "--api-base", "--model claude-sonnet-4-5", "--owner-id"):
            assert flag in command, command
        finish = subprocess.run(
            ["bash", "-c", command],
            env={**env, "ANTHROPIC_API_KEY": API_KEY},
            capture_output=True,
            text=True,
            timeout=90,
        )
    assert finish.returncode == 0, finish.stderr
    config = load_config(folder / "agentd.toml", env={})
    assert config.llm.base_url == llm.base_url and config.llm.model == "claude-sonnet-4-5"
    assert config.secrets.anthropic_api_key is not None


def test_help_names_each_flag_once_and_shows_the_whole_default() -> None:
    from agentd.cli.app import app

    result = CliRunner().invoke(app, ["init", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert "--non-interactive" in result.output and "--no-non-interactive" not in result.output
    assert "--no-force" not in result.output and "--skip-model-check" in result.output
    assert "https://api.telegram.org)" in result.output  # not cut at the column's end


class _Foreign(http.server.BaseHTTPRequestHandler):
    """Not the Messages API: an OpenAI-style model list, and a web page for anything else."""

    def do_GET(self) -> None:
        if self.path.startswith(("/v1/models", "/json/v1/models")):
            self._send(200, "application/json", b'{"data": [{"id": "llama", "object": "model"}]}')
        else:
            self._send(200, "text/html", b"<html>welcome</html>")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.startswith("/page/"):
            self._send(200, "text/html", b"<html>welcome</html>")
        elif self.path.startswith("/json/"):  # an OpenAI-style server's JSON 404 for a route
            body = b'{"error": {"message": "Not Found", "type": "invalid_request_error"}}'
            self._send(404, "application/json", body)
        else:
            self._send(404, "text/plain", b"404 page not found")

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def foreign() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Foreign)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_url_that_is_not_the_messages_api_is_blamed_not_passed(foreign: str) -> None:
    """A list in another API's shape, or a page answering 200 to anything, is not taken as
    proof: the one-token message decides, and the base URL is named."""
    for base in (foreign, f"{foreign}/page", f"{foreign}/json"):
        with pytest.raises(ModelProblem) as problem:
            check_model(base, API_KEY, "llama")
        assert problem.value.fault == "base_url" and "--llm-base-url" in str(problem.value)
        assert "refused the model" not in str(problem.value)  # the URL, not the model
    with pytest.raises(ModelProblem) as problem:
        check_model("http://127.0.0.1:9", API_KEY, "claude-haiku-4-5")
    assert problem.value.fault == "base_url" and "unreachable" in str(problem.value)


def test_a_model_is_not_listed_again_under_its_dated_id() -> None:
    """Anthropic lists dated ids; `claude-sonnet-4-5` is `claude-sonnet-4-5-20250929`."""
    from agentd.cli.model_check import other_models

    listed = ["claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001", "claude-sonnet-4"]
    assert other_models("claude-sonnet-4-5", listed) == listed[1:]
    assert other_models("claude-sonnet-4-5-20250929", listed) == listed[1:]
    assert other_models("claude-sonnet-4", listed) == listed[:2]  # 4 is not 4-5
