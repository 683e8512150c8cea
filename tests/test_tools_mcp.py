"""Tools from MCP servers: a tiny echo server over stdio and streamable HTTP (R-TOOL-6)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.config import McpServerConfig, ToolsConfig
from agentd.runtime.redact import Redactor
from agentd.tools import McpServers, ToolContext, ToolRegistry, execute
from agentd.tools.mcp import _STDERR_LINE, _STDERR_PER_MINUTE, _StderrLog, tool_name

pytest.importorskip("mcp")

ECHO = str(Path(__file__).parent / "mcp_servers" / "echo_server.py")
CTX = ToolContext(chat_id=1, chat_kind="private", user_id=2, instance_id="test")


def stdio(name: str = "echo", **kwargs: object) -> McpServerConfig:
    return McpServerConfig(name=name, command=sys.executable, args=[ECHO], **kwargs)  # type: ignore[arg-type]


async def test_stdio_tools_are_listed_and_called() -> None:
    async with McpServers([stdio(timeout=1.0)], redact=Redactor()) as mcp:
        assert mcp.problems == []
        tools = {t.name: t for t in mcp.tools}
        assert set(tools) == {"echo__add", "echo__echo", "echo__fail", "echo__sleep", "echo__crash"}
        add = tools["echo__add"]
        assert add.risk == "high" and add.source == "mcp:echo" and add.timeout == 1.0
        assert add.description == "[from MCP server echo] Add two integers."
        assert add.llm_spec()["input_schema"]["required"] == ["a", "b"]

        result = await execute(add, CTX, {"a": 2, "b": 3})
        assert result.ok, result.content
        assert (
            '<untrusted_content source="mcp:echo/add">\n5\n</untrusted_content>' in result.content
        )

        echoed = await execute(tools["echo__echo"], CTX, {"text": "héllo"})
        assert echoed.ok and "héllo" in echoed.content

        # Checked against the server's JSON schema before anything is sent.
        invalid = await execute(add, CTX, {"a": "two"})
        assert invalid.error_kind == "invalid_arguments"
        assert "'b' is a required property" in invalid.content
        assert "'two' is not of type 'integer'" in invalid.content

        # isError results become error outcomes.
        failed = await execute(tools["echo__fail"], CTX, {"message": "boom"})
        assert not failed.ok and failed.error_kind == "tool_error" and "boom" in failed.content

        # A call that outlives the server's timeout is cut off; the session keeps working.
        slow = await execute(tools["echo__sleep"], CTX, {"seconds": 30})
        assert slow.error_kind == "timeout"
        again = await execute(add, CTX, {"a": 1, "b": 1})
        assert again.ok and "\n2\n" in again.content

        registry, problems = ToolRegistry.build(
            ToolsConfig(risk={"echo__echo": "low"}), builtins=[], extra=mcp.tools
        )
        assert problems == []
        assert registry.get("echo__echo").risk == "low"  # type: ignore[union-attr]
        assert registry.get("echo__add").risk == "high"  # type: ignore[union-attr]

    closed = await execute(add, CTX, {"a": 1, "b": 1})
    assert closed.error_kind == "tool_error" and "not connected" in closed.content


async def test_a_server_that_crashes_mid_session_gives_error_outcomes() -> None:
    async with McpServers([stdio(timeout=5.0)], redact=Redactor()) as mcp:
        tools = {t.name: t for t in mcp.tools}
        crashed = await execute(tools["echo__crash"], CTX, {})
        assert crashed.error_kind == "tool_error"
        after = await execute(tools["echo__add"], CTX, {"a": 1, "b": 2})
        assert after.error_kind == "tool_error" and "echo" in after.content


async def test_broken_servers_are_reported_and_the_others_still_connect() -> None:
    servers = [
        McpServerConfig(name="missing", command="/nonexistent/mcp-server"),
        McpServerConfig(name="quits", command=sys.executable, args=["-c", "raise SystemExit(3)"]),
        McpServerConfig(
            name="silent",
            command=sys.executable,
            args=["-c", "import time; time.sleep(30)"],
            connect_timeout=0.5,
        ),
        stdio(risk="medium"),
    ]
    started = time.monotonic()
    async with McpServers(servers, redact=Redactor()) as mcp:
        assert time.monotonic() - started < 10
        problems = {p.source: p.message for p in mcp.problems}
        assert set(problems) == {"mcp:missing", "mcp:quits", "mcp:silent"}
        assert "No such file or directory" in problems["mcp:missing"]
        assert problems["mcp:quits"].startswith("could not connect")
        assert "no answer within 0.5 s" in problems["mcp:silent"]
        assert {t.risk for t in mcp.tools} == {"medium"} and len(mcp.tools) == 5


async def test_pass_env_and_missing_mcp_package(monkeypatch: pytest.MonkeyPatch) -> None:
    config = stdio(pass_env=["ECHO_TOKEN", "NOT_SET_ANYWHERE"])
    async with McpServers([config], redact=Redactor(), environ={"ECHO_TOKEN": "t"}) as mcp:
        assert [p.message for p in mcp.problems] == [
            "pass_env names NOT_SET_ANYWHERE, which is not set"
        ]
        assert len(mcp.tools) == 5

    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the extra were not installed
    async with McpServers([config], redact=Redactor()) as mcp:
        assert mcp.tools == []
        assert "pip install 'agentd[mcp]'" in mcp.problems[0].message


async def test_a_stdio_servers_stderr_is_logged_redacted_not_passed_through(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    token = "mcp-token-5f0c1e2d3b4a"
    caplog.set_level(logging.INFO, logger="agentd.tools.mcp")
    config = stdio(pass_env=["ECHO_TOKEN"])
    async with McpServers([config], redact=Redactor(), environ={"ECHO_TOKEN": token}) as mcp:
        assert len(mcp.tools) == 5
    lines = [r for r in caplog.records if r.getMessage().startswith("MCP server stderr")]
    assert [r.mcp_server for r in lines] == ["echo"]  # type: ignore[attr-defined]
    assert "access_token=[REDACTED] -> 401" in lines[0].getMessage()
    # Nothing reaches the daemon's own stderr (the journal) past the log.
    assert token not in capfd.readouterr().err
    assert all(token not in r.getMessage() for r in caplog.records)


def test_stderr_lines_are_cut_after_redacting_and_capped_per_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agentd.tools.mcp")
    secret = "s3cret-value-0123456789"
    sink = _StderrLog("chatty", Redactor(), [secret])
    # The secret straddles the cut: redacted whole first, so no piece of it is left.
    sink.line(("x" * (_STDERR_LINE - 5) + secret).encode(), 0.0)
    first = caplog.records[0].getMessage()
    assert "s3cr" not in first and first.endswith(" …")
    for _ in range(_STDERR_PER_MINUTE + 10):
        sink.line(b"again", 1.0)
    sink.line(b"a minute later", 61.0)
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("MCP server stderr: again") == _STDERR_PER_MINUTE - 1  # and the first
    assert "MCP server stderr: 11 lines not logged (more than 120 a minute)" in messages
    assert messages[-1] == "MCP server stderr: a minute later"


def test_a_value_the_process_learns_later_is_hidden_before_a_stderr_line_is_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server's stderr goes through the process's one redactor: a token met after the
    server started (a Matrix login's, a profile's cookie) is hidden whole before the cut,
    which would leave a piece the log's redactor no longer knows."""
    caplog.set_level(logging.INFO, logger="agentd.tools.mcp")
    shared = Redactor()
    sink = _StderrLog("chatty", shared, ["handed-value-0123456789"])
    learned = "learned-later-9f8e7d6c5b"
    shared.learn([learned])
    sink.line(("x" * (_STDERR_LINE - 5) + learned).encode(), 0.0)
    sink.line(b"handed-value-0123456789 and " + learned.encode(), 1.0)
    first, second = (r.getMessage() for r in caplog.records)
    assert "learn" not in first and first.endswith(" …")
    assert second == "MCP server stderr: [REDACTED] and [REDACTED]"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, ECHO, "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("the HTTP MCP server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_streamable_http_server(http_server: str) -> None:
    servers = [
        McpServerConfig(name="web", url=http_server, headers={"X-Test": "1"}),
        McpServerConfig(name="needs_token", url=http_server, bearer_token_env="NO_SUCH_TOKEN"),
    ]
    async with McpServers(servers, redact=Redactor(), environ={}) as mcp:
        assert [p.source for p in mcp.problems] == ["mcp:needs_token"]
        assert "NO_SUCH_TOKEN" in mcp.problems[0].message
        add = next(t for t in mcp.tools if t.name == "web__add")
        result = await asyncio.wait_for(execute(add, CTX, {"a": 20, "b": 22}), 10)
        assert result.ok and "\n42\n" in result.content


def test_tool_names_are_prefixed_and_sanitised() -> None:
    assert tool_name("github", "create_issue") == "github__create_issue"
    assert tool_name("fs", "read file/v2") == "fs__read_file_v2"
    assert len(tool_name("s", "x" * 100)) == 64


def test_trust_says_what_a_server_that_would_not_start_wrote(tmp_path: Path) -> None:
    """`agentd mcp trust` of a server that dies at start shows its last stderr lines (its best
    clue: a missing module, a bad flag), with the values it was handed redacted."""
    import subprocess

    token = "tok-" + "q9X3kLm7" * 3
    crash = "import sys; print('boom: no module named mcp_thing', sys.argv[1], file=sys.stderr)"
    config = tmp_path / "agentd.toml"
    config.write_text(
        f'[storage]\npath = "{tmp_path / "agentd.db"}"\n\n[[tools.mcp]]\nname = "broken"\n'
        f'command = "{sys.executable}"\nargs = ["-c", "{crash}; sys.exit(3)", "{token}"]\n'
        f'env = {{ BROKEN_TOKEN = "{token}" }}\n'
    )
    env = {**os.environ, "AGENTD_CONFIG": str(config)}
    done = subprocess.run(
        [sys.executable, "-m", "agentd", "mcp", "trust", "broken", "--yes"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "MCP server broken" in said, said
    assert "boom: no module named mcp_thing [REDACTED]" in said, said
    assert token not in said
