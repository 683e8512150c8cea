"""End to end: tools under the risk policy, approvals by button and CLI, restarts while waiting.

Most tests share one daemon (each in its own chat); the ones that restart it have their own.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from tests.daemon_process import REPO_ROOT, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

APPROVAL_TIMEOUT = 4.0
# Handed to the echo server by pass_env; it prints it on its stderr, as a chatty server would.
MCP_TOKEN = "mcp-e2e-token-5f0c1e2d3b4a"
USERS = list(range(100, 130))
CONFIG = f"""
[tools]
plugins = ["tests.plugins.e2e_tools", "tests.plugins.broken_plugin", "no.such.module"]
approval_timeout = {APPROVAL_TIMEOUT}

[[tools.mcp]]
name = "echo"
command = "{sys.executable}"
args = ["{REPO_ROOT / "tests" / "mcp_servers" / "echo_server.py"}"]
risk = "low"
pass_env = ["ECHO_TOKEN"]

[[tools.mcp]]
name = "gone"
command = "/nonexistent/mcp-server"
"""


def tool_env(tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, **extra: str) -> dict[str, str]:
    (tmp / "agentd.toml").write_text(CONFIG)
    env = daemon_env(
        tmp,
        tg.base_url,
        llm.base_url,
        AGENTD_CONFIG=str(tmp / "agentd.toml"),
        AGENTD_ACCESS__ALLOWED_USER_IDS=str(USERS),
        # Each user approves their own calls here; test_e2e_trust.py covers who may approve.
        AGENTD_ACCESS__APPROVERS=str(USERS),
        ECHO_TOKEN=MCP_TOKEN,
        **extra,
    )
    trust_echo(tmp, env)
    return env


class Stack:
    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon) -> None:
        self.tg, self.llm, self.daemon = tg, llm, daemon
        self._users = iter(USERS)

    def user(self) -> int:
        return next(self._users)

    def requests_for(self, user: int) -> list[dict[str, Any]]:
        """The model requests made for this user's chat (first user message names the user)."""
        return [r for r in self.llm.requests if f"u{user}:" in str(r["body"]["messages"][0])]

    def sent(self, chat: int) -> list[dict[str, Any]]:
        return [m for m in self.tg.sent if m["chat_id"] == chat]

    def wait_sent(self, chat: int, n: int, timeout: float = 20) -> list[dict[str, Any]]:
        return self.tg.wait_until(
            lambda: (s := self.sent(chat)) and len(s) >= n and s, timeout, f"{n} messages to {chat}"
        )

    def approval_message(self, chat: int) -> dict[str, Any]:
        return self.tg.wait_until(
            lambda: next((m for m in self.sent(chat) if m["reply_markup"]), None),
            20,
            "an approval request",
        )

    def press(self, user: int, chat: int, message: dict[str, Any], approve: bool) -> int:
        buttons = message["reply_markup"]["inline_keyboard"][0]
        data = buttons[0 if approve else 1]["callback_data"]
        return self.tg.add_callback_query(user, chat, message["message_id"], data)

    def tool_results(self, user: int) -> list[dict[str, Any]]:
        blocks = []
        for request in self.requests_for(user):
            for message in request["body"]["messages"]:
                if isinstance(message["content"], list):
                    blocks += [b for b in message["content"] if b.get("type") == "tool_result"]
        return {b["tool_use_id"]: b for b in blocks}.values()  # type: ignore[return-value]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("tools")
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        with running_daemon(tmp, tool_env(tmp, tg, llm)) as daemon:
            yield Stack(tg, llm, daemon)


def trust_echo(tmp: Path, env: dict[str, str]) -> None:
    """The owner read the echo server's tools and trusted them (the CLI needs the database the
    first `agentd run` leaves)."""
    installer = Daemon(tmp, env)
    conn = open_sync(installer.db_path)
    try:
        apply_migrations(conn)
    finally:
        conn.close()
    trusted = installer.cli("mcp", "trust", "echo", "--yes")
    assert trusted.returncode == 0, trusted.stderr
    assert MCP_TOKEN not in trusted.stderr + trusted.stdout


def script(stack: Stack, user: int, *replies: Any) -> None:
    """Answer this user's turns with the given replies, in order, whatever else is going on."""
    queue = list(replies)
    previous = stack.llm._responder

    def responder(body: dict[str, Any]) -> Any:
        if f"u{user}:" in str(body["messages"][0]) and queue:
            return queue.pop(0)
        return previous(body) if previous else None

    stack.llm.set_responder(responder)


def tool_use(name: str, args: dict[str, Any], use_id: str) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": use_id, "name": name, "input": args}]


def test_broken_plugins_and_mcp_servers_are_reported_not_fatal(stack: Stack) -> None:
    log = stack.daemon.log()
    problems = [line for line in log.splitlines() if '"tool problem"' in line]
    assert any("no.such.module" in p for p in problems)
    assert any("broken_plugin" in p for p in problems)
    assert any("gone" in p for p in problems)
    assert stack.daemon.proc is not None and stack.daemon.proc.poll() is None


def test_an_mcp_servers_stderr_reaches_the_log_redacted(stack: Stack) -> None:
    stack.daemon.wait_for_log("MCP server stderr")
    log = stack.daemon.log()
    said = [line for line in log.splitlines() if "MCP server stderr" in line]
    assert any("access_token=[REDACTED]" in line and '"echo"' in line for line in said), said
    assert MCP_TOKEN not in log


def test_low_risk_tool_runs_and_its_result_reaches_the_model(stack: Stack) -> None:
    user = stack.user()
    script(
        stack,
        user,
        tool_use("count_words", {"text": "one two three"}, "toolu_low1"),
        "There are 3 words.",
    )
    stack.tg.add_message(user, user, f"u{user}: how many words in 'one two three'?")
    assert stack.wait_sent(user, 1)[0]["plain_text"] == "There are 3 words."
    results = list(stack.tool_results(user))
    assert results[0]["content"] == "3" and not results[0].get("is_error")
    assert stack.daemon.effects().count("count_words one two three") == 1
    spec = stack.requests_for(user)[0]["body"]["tools"]
    assert {"count_words", "delete_file", "current_time", "fetch_url", "echo__add"} <= {
        t["name"] for t in spec
    }
    system = stack.requests_for(user)[0]["body"]["system"][0]["text"]
    medium = next(line for line in system.splitlines() if line.startswith("Medium-risk tools"))
    high = next(line for line in system.splitlines() if line.startswith("High-risk tools"))
    assert "say plainly in your reply what you did" in medium and "add_note" in medium
    assert "owner is asked first" in high and "delete_file" in high
    assert "count_words" not in medium + high


def test_medium_risk_tool_runs_and_the_reply_reports_it(stack: Stack) -> None:
    user = stack.user()
    script(stack, user, tool_use("add_note", {"text": "buy milk"}, "toolu_med1"), "Noted!")
    stack.tg.add_message(user, user, f"u{user}: note: buy milk")
    reply = stack.wait_sent(user, 1)[0]["plain_text"]
    assert reply.startswith("Noted!") and "Done on your behalf: add_note" in reply
    assert "add_note buy milk" in stack.daemon.effects()


def test_high_risk_tool_approved_by_button(stack: Stack) -> None:
    user = stack.user()
    script(stack, user, tool_use("delete_file", {"path": "/tmp/a.txt"}, "toolu_hi1"), "Deleted.")
    stack.tg.add_message(user, user, f"u{user}: delete /tmp/a.txt")
    request = stack.approval_message(user)
    assert "delete_file" in request["plain_text"] and "/tmp/a.txt" in request["plain_text"]
    assert "delete_file /tmp/a.txt" not in stack.daemon.effects()  # nothing before consent
    press = stack.press(user, user, request, approve=True)
    replies = stack.wait_sent(user, 2)
    assert replies[1]["plain_text"] == "Deleted."
    assert stack.daemon.effects().count("delete_file /tmp/a.txt") == 1
    answer = next(
        a
        for a in stack.tg.callback_answers
        if a["callback_query_id"] == stack.tg.callback_query_id(press)
    )
    assert answer["text"] == "Approved: delete_file."
    edit = next(
        e
        for e in stack.tg.edits
        if e["chat_id"] == request["chat_id"] and e["message_id"] == request["message_id"]
    )
    assert "Approved by chat:" in edit["plain_text"]
    # Pressing again changes nothing and says so.
    again = stack.press(user, user, request, approve=False)
    stack.tg.wait_until(
        lambda: any(
            a["callback_query_id"] == stack.tg.callback_query_id(again)
            for a in stack.tg.callback_answers
        ),
        10,
        "second answer",
    )
    second = [
        a
        for a in stack.tg.callback_answers
        if a["callback_query_id"] == stack.tg.callback_query_id(again)
    ]
    assert second[0]["text"] == "Already decided: approved."
    rows = stack.daemon.query(
        "SELECT detail FROM audit WHERE kind = 'tool_call' AND detail LIKE '%delete_file%'"
    )
    assert any('"decision": "approved"' in r[0] for r in rows)
    assert all("/tmp/a.txt" not in r[0] for r in rows)  # the digest, never the arguments


def test_high_risk_tool_denied_by_button(stack: Stack) -> None:
    user = stack.user()
    script(stack, user, tool_use("delete_file", {"path": "/etc/x"}, "toolu_hi2"), "Not done.")
    stack.tg.add_message(user, user, f"u{user}: delete /etc/x")
    stack.press(user, user, stack.approval_message(user), approve=False)
    assert stack.wait_sent(user, 2)[1]["plain_text"] == "Not done."
    result = next(iter(stack.tool_results(user)))
    assert result["is_error"] and "denied" in result["content"]
    assert "delete_file /etc/x" not in stack.daemon.effects()


def test_high_risk_tool_times_out_and_is_not_called_denied(stack: Stack) -> None:
    user = stack.user()
    script(stack, user, tool_use("delete_file", {"path": "/slow"}, "toolu_hi3"), "Gave up.")
    stack.tg.add_message(user, user, f"u{user}: delete /slow")
    request = stack.approval_message(user)
    assert stack.wait_sent(user, 2, timeout=APPROVAL_TIMEOUT + 20)[1]["plain_text"] == "Gave up."
    result = next(iter(stack.tool_results(user)))
    assert result["is_error"] and "timed out" in result["content"]
    assert "denied" not in result["content"].replace("not denied", "")
    assert "delete_file /slow" not in stack.daemon.effects()
    status = stack.daemon.query("SELECT status FROM approvals WHERE chat_id = ?", (user,))
    assert status[0][0] == "timed_out"
    edit = next(
        e
        for e in stack.tg.edits
        if e["chat_id"] == request["chat_id"] and e["message_id"] == request["message_id"]
    )
    assert "No answer in time" in edit["plain_text"]
    late = stack.press(user, user, request, approve=True)
    stack.tg.wait_until(
        lambda: [
            a
            for a in stack.tg.callback_answers
            if a["callback_query_id"] == stack.tg.callback_query_id(late)
        ],
        10,
        "answer",
    )
    assert "delete_file /slow" not in stack.daemon.effects()


def test_approve_from_the_cli_reaches_the_turn_quickly(stack: Stack) -> None:
    user = stack.user()
    script(stack, user, tool_use("delete_file", {"path": "/cli"}, "toolu_hi4"), "Done via CLI.")
    stack.tg.add_message(user, user, f"u{user}: delete /cli")
    stack.approval_message(user)
    waiting = [a for a in stack.daemon.cli_json("pending") if a["chat_id"] == user]
    assert len(waiting) == 1 and waiting[0]["tool"] == "delete_file"
    before = len(stack.requests_for(user))
    result = stack.daemon.cli("approve", waiting[0]["id"])
    assert result.returncode == 0, result.stderr
    # How fast the daemon notices is benchmarks/approval_latency.py's figure, not a test's.
    stack.llm.wait_until(lambda: len(stack.requests_for(user)) > before, 10, "the next call")
    assert stack.wait_sent(user, 2)[1]["plain_text"] == "Done via CLI."
    assert stack.daemon.effects().count("delete_file /cli") == 1
    again = stack.daemon.cli("approve", waiting[0]["id"])
    assert again.returncode == 1 and "Already decided" in again.stderr
    unknown = stack.daemon.cli("deny", "no-such-approval-id")
    assert unknown.returncode == 1 and "no approval no-such-approval-id" in unknown.stderr
    assert "agentd pending" in unknown.stderr  # says where the real ids are


def test_a_stranger_cannot_approve(stack: Stack) -> None:
    user = stack.user()
    script(stack, user, tool_use("delete_file", {"path": "/x"}, "toolu_hi5"), "ok")
    stack.tg.add_message(user, user, f"u{user}: delete /x")
    request = stack.approval_message(user)
    stack.press(999, user, request, approve=True)
    # A forged callback from an allowed user is answered and changes nothing either. Its
    # answer is the marker for the stranger's press: updates are taken in order.
    stack.tg.add_callback_query(user, user, request["message_id"], "ap:AAAAAAAAAAAA:y")
    garbage = stack.tg.callback_query_id(
        stack.tg.add_callback_query(user, user, request["message_id"], "garbage")
    )
    stack.tg.wait_until(
        lambda: any(a["callback_query_id"] == garbage for a in stack.tg.callback_answers),
        10,
        "the answer to the garbage press",
    )

    def status() -> str:
        return stack.daemon.query("SELECT status FROM approvals WHERE chat_id = ?", (user,))[0][0]

    assert status() == "pending"
    assert "delete_file /x" not in stack.daemon.effects()
    stack.press(user, user, request, approve=False)
    stack.wait_sent(user, 2)  # the turn went on after the owner's decision
    texts = [a["text"] for a in stack.tg.callback_answers]
    assert "This approval is unknown." in texts and "This button is not recognised." in texts
    assert status() == "denied"
    assert "delete_file /x" not in stack.daemon.effects()


def test_tool_failures_go_back_to_the_model(stack: Stack) -> None:
    user = stack.user()
    script(
        stack,
        user,
        tool_use("count_words", {"txt": 5}, "toolu_bad1")
        + tool_use("explode", {}, "toolu_bad2")
        + tool_use("hang", {}, "toolu_bad3")
        + tool_use("no_such_tool", {}, "toolu_bad4"),
        "Everything failed.",
    )
    stack.tg.add_message(user, user, f"u{user}: try things")
    assert stack.wait_sent(user, 1)[0]["plain_text"] == "Everything failed."
    results = {r["tool_use_id"]: r for r in stack.tool_results(user)}
    assert len(results) == 4 and all(r["is_error"] for r in results.values())
    assert "Invalid arguments for count_words" in results["toolu_bad1"]["content"]
    assert "the tool blew up" in results["toolu_bad2"]["content"]
    assert "did not finish within 0.5 s" in results["toolu_bad3"]["content"]
    assert "no_such_tool" in results["toolu_bad4"]["content"]


def test_mcp_tool_and_fetch_url_refusal(stack: Stack) -> None:
    user = stack.user()
    script(
        stack,
        user,
        # The fetch first: an MCP result is outside content, and after it a fetch of a URL
        # the turn has not seen would ask the owner (tests/test_e2e_taint.py).
        tool_use("fetch_url", {"url": stack.tg.base_url + "/"}, "toolu_f1")
        + tool_use("echo__add", {"a": 2, "b": 3}, "toolu_mcp1"),
        "2 + 3 = 5",
    )
    stack.tg.add_message(user, user, f"u{user}: add 2 and 3, and fetch the local page")
    assert stack.wait_sent(user, 1)[0]["plain_text"] == "2 + 3 = 5"
    results = {r["tool_use_id"]: r for r in stack.tool_results(user)}
    mcp_result = results["toolu_mcp1"]["content"]
    assert "\n5\n" in mcp_result and "<untrusted_content" in mcp_result  # data, not orders
    assert results["toolu_f1"]["is_error"]
    assert "127.0.0.1" in results["toolu_f1"]["content"]


def test_step_limit_still_answers(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = tool_env(tmp_path, tg, llm, AGENTD_LLM__MAX_STEPS="2")
        llm.enqueue_tool_use("count_words", {"text": "a"}, "toolu_s1", text_before="Counting…")
        llm.enqueue_tool_use("count_words", {"text": "b"}, "toolu_s2")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(100, 100, "loop forever")
            reply = tg.wait_for_sent(1, timeout=20)[0]["plain_text"]
            assert "step limit" in reply and reply.startswith("Counting…")
            assert len(llm.requests) == 2
            assert daemon.effects() == ["count_words a"]  # the last requested tool never ran


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "kill-9"])
def test_restart_while_waiting_then_approve(tmp_path: Path, crash: bool) -> None:
    """The approval row and the wait step survive a stop, and a kill -9 (they are unsynced
    commits: in the OS page cache once COMMIT returns)."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = tool_env(tmp_path, tg, llm, AGENTD_TOOLS__APPROVAL_TIMEOUT="300")
        llm.enqueue_tool_use("delete_file", {"path": "/r"}, "toolu_r1")
        llm.enqueue_text("Deleted after the restart.")
        daemon = Daemon(tmp_path, env)
        try:
            daemon.start()
            tg.add_message(100, 100, "delete /r")
            request = tg.wait_until(
                lambda: next((m for m in tg.sent if m["reply_markup"]), None), 20, "approval"
            )
            daemon.wait_for_instances(1, status="waiting")
            if crash:
                daemon.kill9()
            else:
                assert daemon.stop() == 0
            daemon.start()
            buttons = request["reply_markup"]["inline_keyboard"][0]
            tg.add_callback_query(100, 100, request["message_id"], buttons[0]["callback_data"])
            tg.wait_for_sent(2, timeout=20)
            assert tg.sent[-1]["plain_text"] == "Deleted after the restart."
            assert daemon.effects() == ["delete_file /r"]
            assert len(daemon.query("SELECT * FROM approvals")) == 1
            assert len([m for m in tg.sent if m["reply_markup"]]) == 1  # asked once, not twice
            assert len(daemon.query("SELECT * FROM messages WHERE role = 'user'")) == 1
        finally:
            daemon.stop()


def test_kill_9_after_a_tool_ran_does_not_run_it_again(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = tool_env(tmp_path, tg, llm)
        llm.enqueue_tool_use("count_words", {"text": "x y"}, "toolu_k1")
        llm.enqueue_delay(60)  # llm#2 hangs: the tool is done, the next call is not
        daemon = Daemon(tmp_path, env).start()
        try:
            tg.add_message(100, 100, "count")
            llm.wait_for_requests(2, timeout=20)
            assert daemon.effects() == ["count_words x y"]
            daemon.kill9()
            llm.reset()
            llm.enqueue_text("Two words.")
            daemon.start()
            tg.wait_for_sent(1, timeout=20)
            assert tg.sent[-1]["plain_text"] == "Two words."
            assert daemon.effects() == ["count_words x y"]
            daemon.wait_for_instances(1)
            # The kill fell after the folded writes (route's held row went with the tool's
            # result, the audit row with its own step): none of them was written twice.
            audits = daemon.query("SELECT kind FROM audit WHERE kind = 'tool_call'")
            assert len(audits) == 1
            steps = daemon.query("SELECT name FROM workflow_steps ORDER BY ordinal")
            names = [r[0] for r in steps]
            assert names[names.index("llm#1") :] == [
                "llm#1",
                "route:toolu_k1",
                "tool:toolu_k1",
                "audit:toolu_k1",
                "steer#2",  # what the user sent meanwhile (nothing): one journaled decision
                "limits#2",  # the [limits] budgets, asked before the call (agent/budget.py)
                "llm#2",
                "send#1",
                "save-reply",
                "audit",
                "schedule-summary",
            ]
        finally:
            daemon.stop()
