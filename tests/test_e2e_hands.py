"""End to end through `agentd run` with the real bubblewrap: the allowlist, the approval card
with "Always allow this", a chained command that a rule must not match, workspace files,
/stop and `workflows cancel` during a command, and kill -9 during a command."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.durable.store import FINAL_STATUSES
from agentd.hands.sandbox import Sandbox, probe
from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.hands_support import alive, reachable_dir


def _problem() -> str | None:
    scratch = reachable_dir()
    try:
        return probe(Sandbox(), scratch)
    finally:
        shutil.rmtree(scratch.parent, ignore_errors=True)


PROBLEM = _problem()
pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox here: {PROBLEM}")
SECRET = "sk-ant-hands-secret-0123456789"
OTHER = 43  # allowed by daemon_env, not an approver


def hands_env(tmp: Path, ws: Path, tg: FakeTelegram, llm: FakeAnthropic) -> dict[str, str]:
    (tmp / "agentd.toml").write_text(
        f'[tools]\napproval_timeout = 120\n\n[tools.workspace]\npath = "{ws}"\n\n'
        "[tools.shell]\nwall_seconds = 60\nprogress_after = 1.0\n\n"
        # Each turn here stands alone: a command's output is outside content, and with a
        # history window every later turn would have it in view (tests/test_e2e_taint.py).
        "[memory]\nhistory_limit = 0\n"
    )
    (tmp / "agentd.env").write_text(f"HANDS_TEST_SECRET={SECRET}\n")
    (tmp / "agentd.env").chmod(0o600)
    return daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp / "agentd.toml"))


def shell(command: str, use_id: str, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"type": "tool_use", "id": use_id, "name": "shell", "input": {"command": command, **extra}}
    ]


class Stack:
    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon, ws: Path) -> None:
        self.tg, self.llm, self.daemon, self.ws = tg, llm, daemon, ws
        self.turns = 0

    def turn(self, *replies: Any) -> None:
        """One user message whose model replies are `replies`, in order."""
        self.llm.reset()
        for reply in replies:
            if isinstance(reply, str):
                self.llm.enqueue_text(reply)
            else:
                use = reply[0]
                self.llm.enqueue_tool_use(use["name"], use["input"], use["id"])
        self.turns += 1
        self.tg.add_message(OWNER, OWNER, f"turn {self.turns}")

    def cards(self) -> list[dict[str, Any]]:
        return [m for m in self.tg.sent if m["chat_id"] == OWNER and m["reply_markup"]]

    def wait_card(self, n: int) -> dict[str, Any]:
        return self.tg.wait_until(
            lambda: len(c := self.cards()) >= n and c[n - 1], 30, f"approval card {n}"
        )

    def press(self, card: dict[str, Any], row: int, col: int) -> None:
        data = card["reply_markup"]["inline_keyboard"][row][col]["callback_data"]
        self.tg.add_callback_query(OWNER, OWNER, card["message_id"], data)

    def answer_to(self, update_id: int) -> str:
        """What the presser of that callback query was told."""
        query_id = self.tg.callback_query_id(update_id)
        answer = self.tg.wait_until(
            lambda: next(
                (a for a in self.tg.callback_answers if a["callback_query_id"] == query_id), None
            ),
            30,
            "an answer",
        )
        return str(answer["text"])

    def wait_text(self, text: str, timeout: float = 30) -> dict[str, Any]:
        return self.tg.wait_until(
            lambda: next((m for m in self.tg.sent if text in m["plain_text"]), None), timeout, text
        )

    def tool_result(self, use_id: str) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for request in self.llm.requests:
                for message in request["body"]["messages"]:
                    for block in message["content"] if isinstance(message["content"], list) else []:
                        if block.get("tool_use_id") == use_id:
                            return block  # type: ignore[no-any-return]
            return None

        return self.llm.wait_until(find, 60, f"the result of {use_id}")

    def shell_audit(self) -> list[str]:
        return [r[0] for r in self.daemon.query("SELECT detail FROM audit WHERE kind = 'shell'")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("hands")
    ws = reachable_dir()
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            with running_daemon(tmp, hands_env(tmp, ws, tg, llm)) as daemon:
                yield Stack(tg, llm, daemon, ws)
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def test_allowlisted_commands_run_at_once_and_see_no_secret(stack: Stack) -> None:
    env_file = stack.daemon.tmp / "agentd.env"
    stack.turn(
        shell(f"ls -la {env_file} {stack.daemon.tmp} /proc/self/root{env_file}", "t_ls"),
        shell("uptime", "t_up"),
        "Looked.",
    )
    stack.wait_text("Looked.")
    listing = stack.tool_result("t_ls")["content"]
    assert "No such file" in listing and SECRET not in listing
    assert "Exit code 0" in stack.tool_result("t_up")["content"]
    assert stack.cards() == []  # nothing asked
    audits = stack.shell_audit()
    assert any(
        '"approval": "on the read-only allowlist"' in a
        and '"exit_code": 0' in a
        and '"sandbox": "bwrap"' in a
        and '"bytes_out"' in a
        for a in audits
    )
    cli = stack.daemon.cli_json("audit", "--kind", "shell")
    assert len(cli) >= 2 and all(e["kind"] == "shell" for e in cli)


def test_always_allow_rule_and_a_chained_command_that_must_not_match(stack: Stack) -> None:
    before = len(stack.cards())
    stack.turn(shell("touch made-by-rule", "t_r1"), "Made.")
    card = stack.wait_card(before + 1)
    text = card["plain_text"]
    assert "$ touch made-by-rule" in text and "60 s wall" in text
    assert "\nnetwork: off\n" in text  # one line per field, not one JSON string with \n
    assert "/workspace" in text and "bubblewrap" in text
    labels = [b["text"] for row in card["reply_markup"]["inline_keyboard"] for b in row]
    assert labels == ["✅ Approve", "❌ Deny", "♾ Always allow this"]
    # "Always allow this" decides the approval, so it gets Approve's check: 43 (allowed, not
    # an approver) on the owner's card, and the owner on another message, are refused.
    always = card["reply_markup"]["inline_keyboard"][1][0]["callback_data"]
    mid = card["message_id"]
    forged = [
        stack.tg.add_callback_query(OTHER, OWNER, mid, always),
        stack.tg.add_callback_query(OWNER, OWNER, mid + 1000, always),
    ]
    assert [stack.answer_to(u) for u in forged] == [
        "Only the owner can approve this; nothing changed.",
        "This button does not belong to that request; nothing changed.",
    ]
    assert stack.daemon.cli_json("rules", "ls") == []
    assert not (stack.ws / "made-by-rule").exists()
    refusals = stack.daemon.query(
        "SELECT user_id FROM audit WHERE kind = 'approval_press_refused' ORDER BY id"
    )
    assert [r[0] for r in refusals] == [OTHER, OWNER]
    stack.press(card, 1, 0)
    stack.wait_text("Made.")
    assert (stack.ws / "made-by-rule").exists()
    rules = stack.daemon.cli_json("rules", "ls")
    assert [(r["program"], r["args_pattern"]) for r in rules] == [("touch", "made-by-rule")]
    # The same command now runs without a card…
    stack.turn(shell("touch made-by-rule", "t_r2"), "Again.")
    stack.wait_text("Again.")
    assert len(stack.cards()) == before + 1
    # …but chained onto something else, it asks, and denied it runs nothing.
    stack.turn(shell("touch made-by-rule; touch chained-evil", "t_r3"), "Refused.")
    chained = stack.wait_card(before + 2)
    assert len(chained["reply_markup"]["inline_keyboard"]) == 1  # no "always" for chains
    stack.press(chained, 0, 1)
    stack.wait_text("Refused.")
    assert not (stack.ws / "chained-evil").exists()
    # Removed with the CLI, the rule stops matching at the very next call.
    stack.daemon.cli("rules", "rm", str(rules[0]["id"]))
    stack.turn(shell("touch made-by-rule", "t_r4"), "Asked.")
    stack.press(stack.wait_card(before + 3), 0, 1)
    stack.wait_text("Asked.")
    kinds = [
        r[0] for r in stack.daemon.query("SELECT kind FROM audit WHERE kind LIKE 'shell_rule%'")
    ]
    assert kinds == ["shell_rule_added", "shell_rule_removed"]


def test_workspace_files_through_the_daemon(stack: Stack) -> None:
    write = [
        {
            "type": "tool_use",
            "id": "t_w1",
            "name": "write_file",
            "input": {"path": "notes/todo.md", "content": "- milk\n"},
        }
    ]
    escape = [
        {
            "type": "tool_use",
            "id": "t_w2",
            "name": "read_file",
            "input": {"path": "../../etc/passwd"},
        }
    ]
    read = [
        {"type": "tool_use", "id": "t_w3", "name": "read_file", "input": {"path": "notes/todo.md"}}
    ]
    stack.turn(write, escape, read, "Filed.")
    stack.wait_text("Filed.")
    assert (stack.ws / "notes" / "todo.md").read_text() == "- milk\n"
    assert stack.tool_result("t_w2")["is_error"]
    assert "leaves the workspace" in stack.tool_result("t_w2")["content"]
    assert stack.tool_result("t_w3")["content"] == "- milk\n"
    rows = stack.daemon.query("SELECT detail FROM audit WHERE kind = 'workspace'")
    assert any('"op": "write"' in r[0] and "notes/todo.md" in r[0] for r in rows)


@pytest.mark.parametrize("how", ["/stop", "cli"])
def test_stopping_a_running_command_kills_its_tree(stack: Stack, how: str) -> None:
    marker = f"{40 + len(stack.cards())}.{int(time.time()) % 1000}"
    before = len(stack.cards())
    stack.turn(
        shell(
            f"echo run >> stop-runs.txt; sleep {marker} & sleep {marker}", "t_s" + how.strip("/")
        ),
        "never said",
    )
    stack.press(stack.wait_card(before + 1), 0, 0)
    stack.tg.wait_until(lambda: alive(f"sleep\x00{marker}"), 30, "the command running")
    stack.wait_text("running…")  # progress, edited in place
    started = time.monotonic()
    if how == "/stop":
        stack.tg.add_message(OWNER, OWNER, "/stop")
    else:
        turn = stack.daemon.query(
            "SELECT id FROM workflow_instances WHERE workflow = 'turn' AND status = 'running'"
        )
        stack.daemon.cli("workflows", "cancel", turn[0][0])
    # The request travels: a long poll (/stop) or the engine's 0.5 s cancel poll (CLI). How
    # fast is for benchmarks; here only that the whole tree goes (the wait bounds a hang).
    stack.tg.wait_until(lambda: not alive(f"sleep\x00{marker}"), 60, "the tree killed")
    print(f"{how}: command tree gone {time.monotonic() - started:.2f} s after the request")
    assert not any("never said" in m["plain_text"] for m in stack.tg.sent)


def test_kill_9_during_a_command_reports_outcome_unknown_and_never_reruns(
    tmp_path: Path,
) -> None:
    ws = reachable_dir()
    marker = f"43.{int(time.time()) % 1000}"
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            env = hands_env(tmp_path, ws, tg, llm)
            daemon = Daemon(tmp_path, env).start()
            stack = Stack(tg, llm, daemon, ws)
            try:
                stack.turn(shell(f"echo run >> runs.txt; sleep {marker}", "t_k"), "unused")
                stack.press(stack.wait_card(1), 0, 0)
                tg.wait_until(lambda: alive(f"sleep\x00{marker}"), 30, "the command running")
                daemon.kill9()
                # --die-with-parent: the sandbox goes with the daemon.
                tg.wait_until(lambda: not alive(f"sleep\x00{marker}"), 10, "the sandbox gone")
                llm.reset()
                llm.enqueue_text("It may not have run; please check.")
                daemon.start()
                notice = stack.wait_text("Outcome unknown")
                assert "may or may not have run" in notice["plain_text"]
                assert f"sleep {marker}" in notice["plain_text"]
                stack.wait_text("please check")
                daemon.wait_for_instances(1)
                assert (ws / "runs.txt").read_text() == "run\n"  # once, never again
                unknown = [m for m in tg.sent if "Outcome unknown" in m["plain_text"]]
                assert len(unknown) == 1
                result = stack.tool_result("t_k")
                assert result["is_error"] and "may or may not" in result["content"]
            finally:
                daemon.stop()
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def test_a_background_job_answers_at_once_and_notifies_when_it_ends(stack: Stack) -> None:
    before = len(stack.cards())
    stack.turn(
        shell("sleep 1.5; echo finished > bg.txt; echo bg-finished", "t_bg", background=True),
        "Started it.",
    )
    card = stack.wait_card(before + 1)
    assert "background job" in card["plain_text"] and "3600 s wall" in card["plain_text"]
    stack.press(card, 0, 0)
    started = stack.tool_result("t_bg")["content"]
    assert started.startswith("Started in the background as job job-")
    reply = stack.wait_text("Started it.")
    notice = stack.wait_text("Background job", timeout=60)
    assert "bg-finished" in notice["plain_text"] and "Exit code 0" in notice["plain_text"]
    sent = stack.tg.sent
    assert sent.index(reply) < sent.index(notice)  # the turn did not wait for the job
    assert (stack.ws / "bg.txt").read_text() == "finished\n"
    sql = "SELECT status FROM workflow_instances WHERE workflow = 'shell-background'"
    stack.tg.wait_until(
        lambda: [r[0] for r in stack.daemon.query(sql)] == ["complete"], 20, "the job complete"
    )
    assert any('"approval": "asked"' in a and "bg-finished" in a for a in stack.shell_audit())


def test_a_long_command_shows_running_edited_in_place(stack: Stack) -> None:
    before = len(stack.cards())
    stack.turn(shell("sleep 6.2; echo slept", "t_long"), "Slept.")
    stack.press(stack.wait_card(before + 1), 0, 0)
    stack.wait_text("Slept.")
    progress = [m for m in stack.tg.sent if "⏳ running…" in m["plain_text"]][-1]

    def edits() -> list[str]:
        return [
            e["plain_text"] for e in stack.tg.edits if e["message_id"] == progress["message_id"]
        ]

    # 1 s, then every 5 s: at least one "running… 6 s" edit, then "finished after 6 s".
    stack.tg.wait_until(lambda: any("finished after" in t for t in edits()), 10, "the end")
    assert any(t.startswith("⏳ running… ") for t in edits())
    assert "finished after" in edits()[-1]


def test_cancelling_a_background_job_kills_its_tree(stack: Stack) -> None:
    marker = f"44.{int(time.time()) % 1000}"
    before = len(stack.cards())
    stack.turn(shell(f"sleep {marker}", "t_bgc", background=True), "Started.")
    stack.press(stack.wait_card(before + 1), 0, 0)
    job = stack.tool_result("t_bgc")["content"].split(" job ")[1].split(".")[0]
    stack.tg.wait_until(lambda: alive(f"sleep\x00{marker}"), 30, "the job running")
    started = time.monotonic()
    stack.daemon.cli("workflows", "cancel", job)
    stack.tg.wait_until(lambda: not alive(f"sleep\x00{marker}"), 10, "the job killed")
    print(f"background job tree gone {time.monotonic() - started:.2f} s after the cancel")
    stack.tg.wait_until(
        lambda: (
            stack.daemon.query("SELECT status FROM workflow_instances WHERE id = ?", (job,))[0][0]
            == "cancelled"
        ),
        10,
        "the job cancelled",
    )
    assert not any(
        "🏁 Background job" in m["plain_text"] and job in m["plain_text"] for m in stack.tg.sent
    )


def test_no_more_background_jobs_than_the_cap_run_at_once(stack: Stack) -> None:
    """Each job holds an engine slot and its memory for up to an hour: past
    `max_background_jobs` (2) a further one is refused, the running ones named, and nothing
    of it runs; once one is stopped, a new one starts."""
    marker = f"45.{int(time.time()) % 1000}"
    jobs = []
    for n in range(3):
        before = len(stack.cards())
        stack.turn(shell(f"sleep {marker}{n}", f"t_cap{n}", background=True), "Done.")
        stack.press(stack.wait_card(before + 1), 0, 0)
        jobs.append(stack.tool_result(f"t_cap{n}")["content"])
    assert all(j.startswith("Started in the background as job job-") for j in jobs[:2])
    running = [j.split(" job ")[1].split(".")[0] for j in jobs[:2]]
    assert jobs[2].startswith("Not started: 2 background jobs are running")
    assert all(job in jobs[2] for job in running)
    stack.tg.wait_until(lambda: alive(f"sleep\x00{marker}1"), 30, "the second job running")
    assert not alive(f"sleep\x00{marker}2")
    sql = "SELECT COUNT(*) FROM workflow_instances WHERE workflow = 'shell-background'"
    count = stack.daemon.query(sql)[0][0]
    stack.daemon.cli("workflows", "cancel", running[0])
    # A job asked to stop holds its place until the daemon has stopped it (within a second).
    status = "SELECT status FROM workflow_instances WHERE id = ?"
    stack.tg.wait_until(
        lambda: stack.daemon.query(status, (running[0],))[0][0] in FINAL_STATUSES,
        30,
        "the cancelled job stopped",
    )
    before = len(stack.cards())
    stack.turn(shell(f"sleep {marker}3", "t_cap3", background=True), "Done.")
    stack.press(stack.wait_card(before + 1), 0, 0)
    assert stack.tool_result("t_cap3")["content"].startswith("Started in the background")
    assert stack.daemon.query(sql)[0][0] == count + 1
    for job in stack.daemon.query(
        "SELECT id FROM workflow_instances WHERE workflow = 'shell-background' "
        "AND status IN ('queued', 'running')"
    ):
        stack.daemon.cli("workflows", "cancel", job[0])


def test_limits_and_no_network_through_the_daemon(tmp_path: Path) -> None:
    import socket
    import threading

    ws = reachable_dir()
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed at the end of the test: nothing came
            server.accept()

    threading.Thread(target=accept, daemon=True).start()
    connect = (
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
        f"{port}), timeout=3); print('CONNECTED')\""
    )
    commands = {
        "t_fork": "f(){ f | f & }; f; sleep 1; echo survived",
        "t_mem": "python3 -c 'x = bytearray(900 * 1024 * 1024)'",
        "t_out": "yes endless",
        "t_wall": "sleep 30",
        "t_net": connect,
        # Twice the memory limit, written into a memfd: no mapping, so no rlimit sees it.
        "t_memfd": (
            "python3 -c \"import os; fd = os.memfd_create('hog'); block = b'x' * (1 << 20)\n"
            "for _ in range(600): os.write(fd, block)\nprint('WROTE ALL')\""
        ),
    }
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            env = hands_env(tmp_path, ws, tg, llm)
            env.update(
                AGENTD_TOOLS__SHELL__WALL_SECONDS="4",
                AGENTD_TOOLS__SHELL__MEMORY_MB="300",
                AGENTD_TOOLS__SHELL__MAX_PROCESSES="40",
                AGENTD_LLM__MAX_STEPS="8",
                AGENTD_TOOLS__SHELL__OUTPUT_BYTES="2000",
            )
            with running_daemon(tmp_path, env) as daemon:
                stack = Stack(tg, llm, daemon, ws)
                stack.turn(*[shell(c, i) for i, c in commands.items()], "Tried.")
                cards = []
                for n in range(1, len(commands) + 1):
                    cards.append(stack.wait_card(n)["plain_text"])
                    stack.press(stack.wait_card(n), 0, 0)
                stack.wait_text("Tried.", timeout=90)
                out = {i: stack.tool_result(i)["content"] for i in commands}
                assert "wall-time limit" in out["t_fork"] or "fork" in out["t_fork"].lower()
                assert "MemoryError" in out["t_mem"]
                assert "bytes of output cut here" in out["t_out"] and len(out["t_out"]) < 2600
                assert "wall-time limit of 4 s" in out["t_wall"]
                assert "CONNECTED" not in out["t_net"] and "Exit code 0" not in out["t_net"]
                # The card promises a memory bound only where a cgroup enforces it: then the
                # memfd hog is killed at 300 MB; else the card says memory is not bounded.
                bounded = all("300 MB memory in all" in c for c in cards)
                assert bounded or all("NOT a bound on the command's memory" in c for c in cards)
                if bounded:
                    assert "more than its memory limit of 300 MB" in out["t_memfd"]
                    assert "WROTE ALL" not in out["t_memfd"]
                stack.turn("Still here.")  # and the daemon lives on
                stack.wait_text("Still here.")
                assert daemon.proc is not None and daemon.proc.poll() is None
                audits = stack.shell_audit()
                # sleep past the wall time, and `yes` stopped by the wall or the output cap.
                stopped = ('"stopped": "wall_time"', '"stopped": "output"')
                assert sum(any(k in a for k in stopped) for a in audits) >= 2
    finally:
        server.close()
        shutil.rmtree(ws.parent, ignore_errors=True)
