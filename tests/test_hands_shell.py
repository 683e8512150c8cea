"""The shell's policy (plain commands, rules, allowlist, taint) and its real bwrap sandbox:
escapes, limits and the process-tree kill, each tried for real."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.config import ShellConfig
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.hands import rules
from agentd.hands.sandbox import Limits, Sandbox, probe, run_sandboxed
from agentd.hands.shell import ShellArgs, ShellPolicy, card_text, offer
from agentd.tools.base import CallState, Tool
from agentd.tools.policy import call_risk
from tests.hands_support import alive, reachable_dir

SANDBOX = Sandbox()


def _sandbox_problem() -> str | None:
    scratch = reachable_dir()
    try:
        return probe(SANDBOX, scratch)
    finally:
        shutil.rmtree(scratch.parent, ignore_errors=True)


PROBLEM = _sandbox_problem()


needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox here: {PROBLEM}")
TEN_SECONDS = Limits(wall_seconds=10)


@pytest.fixture
def book(tmp_path: Path) -> rules.RuleBook:
    conn = open_sync(tmp_path / "db.sqlite")
    apply_migrations(conn)
    conn.execute("BEGIN IMMEDIATE")
    rules.add_rule(
        conn, "systemctl", rules.exact_pattern(["systemctl", "restart", "jelly"]), "test", None
    )
    conn.execute("COMMIT")
    conn.close()
    made = rules.RuleBook(tmp_path / "db.sqlite")
    yield made
    made.close()


@pytest.mark.parametrize(
    "command",
    [
        "df -h; rm -rf x",
        "df && rm x",
        "df || x",
        "df | sh",
        "df > /workspace/x",
        "df < x",
        "echo $(id)",
        "echo `id`",
        'echo "$(id)"',
        "df &",
        "df\nrm x",
        "(df)",
        "{ df; }",
        "df # x",
        "A=1 df",
        "echo ${HOME}",
        "df \\; rm",
    ],
)
def test_shell_syntax_is_never_plain(command: str) -> None:
    assert not rules.parse(command).ok


def test_plain_commands_parse_to_their_words() -> None:
    assert rules.parse("df -h /").argv == ["df", "-h", "/"]
    assert rules.parse("systemctl restart 'jelly'").argv == ["systemctl", "restart", "jelly"]


def test_an_always_allow_rule_never_matches_a_chained_command(book: rules.RuleBook) -> None:
    policy = ShellPolicy(shell=ShellConfig(), book=book)
    untainted = CallState()
    allowed = policy.assess(ShellArgs(command="systemctl restart jelly"), untainted)
    assert allowed is not None and allowed.risk == "low" and "rule #1" in allowed.reason
    for chained in (
        "systemctl restart jelly; rm -rf /workspace",
        "systemctl restart jelly && id",
        "systemctl restart jelly | sh",
        "systemctl restart jelly $(id)",
        "systemctl restart jelly > x",
    ):
        verdict = policy.assess(ShellArgs(command=chained), untainted)
        assert verdict is not None and verdict.risk == "high", chained
    for other in ("systemctl stop jelly", "systemctl restart jelly*", "systemctl restart jelly x"):
        assert policy.assess(ShellArgs(command=other), untainted) is None  # the tool's level


def test_a_rule_pressed_on_a_foreground_card_does_not_cover_a_background_job(
    book: rules.RuleBook,
) -> None:
    """The card a rule is pressed on shows the foreground's wall time; a background job of
    the same command runs 30 times longer, beside others: it asks, and offers no rule."""
    shell = ShellConfig()
    policy = ShellPolicy(shell=shell, book=book)
    foreground = ShellArgs(command="systemctl restart jelly")
    background = ShellArgs(command="systemctl restart jelly", background=True)
    allowed = policy.assess(foreground, CallState())
    assert allowed is not None and allowed.risk == "low"
    assert policy.assess(background, CallState()) is None  # the tool's level: a card
    assert f"{shell.background_wall_seconds:g} s wall" in card_text(shell, background)
    assert offer(shell, foreground) == ["systemctl", "restart", "jelly"]
    assert offer(shell, background) is None


def test_allowlist_taint_network_and_no_sandbox_ask(book: rules.RuleBook) -> None:
    policy = ShellPolicy(shell=ShellConfig(), book=book)
    low = policy.assess(ShellArgs(command="df -h"), CallState())
    assert low is not None and low.risk == "low"
    tainted = CallState(tainted_by=("https://evil.example/page",))
    verdict = policy.assess(ShellArgs(command="systemctl restart jelly"), tainted)
    assert verdict is not None and verdict.risk == "high" and "evil.example" in verdict.reason
    # Read-only and offline: it can neither send out nor change anything, tainted or not.
    read_only = policy.assess(ShellArgs(command="df -h"), tainted)
    assert read_only is not None and read_only.risk == "low" and read_only.egress is False
    net = policy.assess(ShellArgs(command="df -h", network=True), CallState())
    assert net is not None and net.risk == "high"
    loose = ShellPolicy(shell=ShellConfig(sandbox="none"), book=book)
    bare = loose.assess(ShellArgs(command="df -h"), CallState())
    assert bare is not None and bare.risk == "high" and "WITHOUT a sandbox" in bare.reason


def test_the_risk_policy_asks_for_a_command_in_a_tainted_turn(book: rules.RuleBook) -> None:
    from dataclasses import replace

    policy = ShellPolicy(shell=ShellConfig(), book=book)

    async def fn(ctx: object, args: object) -> str:
        return ""

    shell = replace(
        Tool.from_model(name="shell", description="d", args_model=ShellArgs, fn=fn, risk="high"),
        egress=True,
        assess=policy.assess,
    )
    args = ShellArgs(command="uptime")
    assert call_risk(shell, args, CallState()).risk == "low"
    assert call_risk(shell, args, CallState(tainted_by=("mail:INBOX/4",))).risk == "low"
    online = ShellArgs(command="uptime", network=True)
    assert call_risk(shell, online, CallState(tainted_by=("mail:INBOX/4",))).risk == "high"
    ruled = ShellArgs(command="systemctl status x")
    assert call_risk(shell, ruled, CallState(tainted_by=("mail:INBOX/4",))).risk == "high"


def test_the_card_shows_command_folder_network_limits_and_offers_plain_only() -> None:
    shell = ShellConfig()
    text = card_text(shell, ShellArgs(command="systemctl restart jelly", cwd="media"))
    assert "$ systemctl restart jelly" in text and "/workspace/media" in text
    assert "network: off" in text and "120 s wall" in text and "bubblewrap" in text
    assert offer(shell, ShellArgs(command="systemctl restart jelly")) == [
        "systemctl",
        "restart",
        "jelly",
    ]
    assert offer(shell, ShellArgs(command="a; b")) is None
    assert offer(shell, ShellArgs(command="curl x", network=True)) is None
    bare = card_text(ShellConfig(sandbox="none"), ShellArgs(command="ls"))
    assert "NONE" in bare


# -- the real sandbox --------------------------------------------------------------------------


@pytest.fixture
def ws() -> Iterator[Path]:
    root = reachable_dir()
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


def run(command: str, ws: Path, limits: Limits = TEN_SECONDS, **kw: object) -> object:
    return asyncio.run(run_sandboxed(command, ws, sandbox=SANDBOX, limits=limits, **kw))  # type: ignore[arg-type]


@needs_bwrap
def test_escapes_fail_inside_the_sandbox(ws: Path, tmp_path: Path) -> None:
    secret = tmp_path / "agentd.env"
    secret.write_text("ANTHROPIC_API_KEY=sk-secret")
    os.environ["HANDS_TEST_SECRET"] = "sk-env-secret"
    try:
        result = run(
            f"cat {secret}; cat /proc/self/root{secret}; env; ls /root /home; "
            "touch /usr/x; cat /etc/shadow; echo ok > inside.txt",
            ws,
        )
    finally:
        del os.environ["HANDS_TEST_SECRET"]
    out = result.output  # type: ignore[attr-defined]
    assert "sk-secret" not in out and "sk-env-secret" not in out
    assert "No such file" in out and "Read-only file system" in out
    assert (ws / "inside.txt").read_text() == "ok\n"


@needs_bwrap
def test_the_hosts_loopback_is_never_reachable(ws: Path) -> None:
    """Without the network there is none; with it, the command's namespace (pasta) has a
    loopback of its own and no port of the host's is forwarded."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed at the end of the test
            for _ in range(2):
                server.accept()

    threading.Thread(target=accept, daemon=True).start()
    probe_cmd = (
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
        f"{port}), timeout=3); print('CONNECTED')\""
    )
    try:
        off = run(probe_cmd, ws)
        on = run(probe_cmd, ws, network=True)
    finally:
        server.close()
    assert "CONNECTED" not in off.output and off.exit_code != 0  # type: ignore[attr-defined]
    assert "CONNECTED" not in on.output and on.exit_code != 0, on.output  # type: ignore[attr-defined]


@needs_bwrap
def test_limits_fork_bomb_memory_output_and_wall_time(ws: Path) -> None:
    lim = Limits(wall_seconds=3, max_processes=30, memory_mb=256, output_bytes=1000)
    started = time.monotonic()
    bomb = run("f(){ f | f & }; f; sleep 1; echo survived", ws, lim)
    assert time.monotonic() - started < 30  # stopped, not hung; wall_seconds is 3
    assert "fork" in bomb.output.lower() or bomb.stopped == "wall_time"  # type: ignore[attr-defined]
    memory = run("python3 -c 'x = bytearray(600 * 1024 * 1024)' || echo REFUSED", ws, lim)
    assert "MemoryError" in memory.output and "REFUSED" in memory.output  # type: ignore[attr-defined]
    endless = run("yes hello", ws, lim)
    assert endless.stopped in ("wall_time", "output") and endless.truncated  # type: ignore[attr-defined]
    assert endless.bytes_out > 1000 and "bytes of output cut here" in endless.output  # type: ignore[attr-defined]
    assert len(endless.output) < 1200  # type: ignore[attr-defined]
    started = time.monotonic()
    sleeper = run("sleep 60", ws, lim)
    assert sleeper.stopped == "wall_time" and time.monotonic() - started < 30  # type: ignore[attr-defined]


@needs_bwrap
def test_cancelling_kills_the_whole_tree_within_a_second(ws: Path) -> None:
    marker = f"{int(time.time() * 1000) % 100000}.5"

    async def scenario() -> float:
        task = asyncio.ensure_future(
            run_sandboxed(
                f"sleep {marker} & sleep {marker} & setsid sleep {marker}; wait",
                ws,
                sandbox=SANDBOX,
                limits=Limits(wall_seconds=60),
            )
        )
        deadline = time.monotonic() + 10
        while not alive(f"sleep\x00{marker}") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert alive(f"sleep\x00{marker}")
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        while alive(f"sleep\x00{marker}") and time.monotonic() - started < 30:
            await asyncio.sleep(0.02)
        return time.monotonic() - started

    print(f"tree gone {asyncio.run(scenario()):.2f} s after the cancel")
    assert not alive(f"sleep\x00{marker}")


@needs_bwrap
def test_sandbox_none_runs_directly_with_an_empty_environment(ws: Path) -> None:
    os.environ["HANDS_TEST_SECRET"] = "sk-env-secret"
    try:
        result = asyncio.run(
            run_sandboxed("env; pwd", ws, sandbox=Sandbox(mode="none"), limits=TEN_SECONDS)
        )
    finally:
        del os.environ["HANDS_TEST_SECRET"]
    assert result.sandbox == "none" and result.exit_code == 0
    assert "sk-env-secret" not in result.output and str(ws) in result.output


@pytest.mark.skipif(os.geteuid() != 0, reason="only root must name a user to run commands as")
def test_as_root_an_empty_run_as_is_refused(ws: Path) -> None:
    problem = probe(Sandbox(run_as=""), ws)
    assert problem is not None and "run_as must name an unprivileged user" in problem


def _pending_shell_approval(conn: object, approval_id: str) -> None:
    from agentd.access import approvals

    now = time.time()
    conn.execute(  # type: ignore[attr-defined]
        "INSERT INTO workflow_instances (id, workflow, key, status, input, created_at, "
        "updated_at) VALUES (?, 'turn', 'chat-1', 'waiting', '{}', ?, ?)",
        (f"turn-{approval_id}", now, now),
    )
    approvals.create(
        conn,
        approvals.Approval(
            id=approval_id,
            instance_id=f"turn-{approval_id}",
            tool_use_id="t1",
            chat_id=1,
            chat_kind="private",
            user_id=1,
            tool="shell",
            risk="high",
            args_digest="d",
            args_preview="$ touch x",
            status="pending",
            created_at=now,
            expires_at=now + 600,
        ),
    )
    rules.offer(conn, approval_id, ["touch", "x*"])


def _press(data: str, user_id: int, chat_id: int, message_id: int) -> object:
    from agentd.chat.inputs import CallbackPress

    return CallbackPress(
        update_id=1,
        callback_id="c",
        chat_id=chat_id,
        chat_kind="group" if chat_id < 0 else "private",
        user_id=user_id,
        message_id=message_id,
        data=data,
    )


def test_always_allow_is_checked_like_approve_and_adds_a_rule_for_an_approver(
    tmp_path: Path,
) -> None:
    """ "Always allow this" decides the approval, so it gets Approve's check: an approver, on
    the card itself (its chat and message); any other press is refused, audited, and changes
    nothing (no decision, no rule)."""
    from agentd.access import approvals

    conn = open_sync(tmp_path / "db.sqlite")
    apply_migrations(conn)
    press = rules.callback_handler(lambda user_id: user_id == 1)
    with conn:
        _pending_shell_approval(conn, "apOwner00001")
        approvals.set_message_id(conn, "apOwner00001", 500)
    refused = [
        _press("ar:apOwner00001", 99, 1, 500),  # not an approver, on the card
        _press("ar:apOwner00001", 1, 77, 500),  # the approver, from another chat
        _press("ar:apOwner00001", 1, 1, 501),  # the approver, on another message
    ]
    said = []
    for p in refused:
        with conn:
            said.append(press(conn, p))
    assert said == [approvals.NOT_AN_APPROVER, approvals.NOT_THIS_CARD, approvals.NOT_THIS_CARD]
    assert rules.list_rules(conn) == []
    assert approvals.get(conn, "apOwner00001").status == "pending"  # type: ignore[union-attr]
    audited = conn.execute(
        "SELECT user_id, chat_id, detail FROM audit WHERE kind = 'approval_press_refused' "
        "ORDER BY id"
    ).fetchall()
    assert [(r[0], r[1]) for r in audited] == [(99, 1), (1, 77), (1, 1)]
    assert all('"approval": "apOwner00001"' in r[2] for r in audited)
    with conn:
        said_ok = press(conn, _press("ar:apOwner00001", 1, 1, 500))
    assert said_ok.startswith("Approved, and from now on allowed")
    assert [(r.program, r.args_pattern) for r in rules.list_rules(conn)] == [("touch", "'x[*]'")]
    assert rules.matching_rule(conn, ["touch", "x*"], 1, 1) is not None
    assert rules.matching_rule(conn, ["touch", "xyz"], 1, 1) is None  # the glob stays literal
    assert rules.matching_rule(conn, ["touch", "x*"], 2, 2) is None  # the card's chat only
    with conn:
        again = press(conn, _press("ar:apOwner00001", 1, 1, 500))
    assert again.startswith("Already decided") and len(rules.list_rules(conn)) == 1
    with conn:
        unknown = press(conn, _press("ar:apNoSuchOne1", 1, 1, 500))
    assert unknown == "This button is not recognised."
    status = conn.execute("SELECT status, decided_by FROM approvals").fetchall()
    conn.close()
    assert [tuple(s) for s in status] == [("approved", "chat:1")]
