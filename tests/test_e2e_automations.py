"""End to end through `agentd run`: automations from a plugin folder, started, signalled and
awaited from the CLI while the daemon runs; /run from chat; ask_owner by button; validation
that names the field; a kill -9 between every pair of steps; ask_owner across a restart."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.db import open_sync
from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import Reply, tool_use_block

FLOWS = Path(__file__).parent / "automations"


def automation_env(
    tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, folder: Path = FLOWS, extra: str = ""
) -> dict[str, str]:
    (tmp / "agentd.toml").write_text(
        f'[automations]\nfolder = "{folder}"\n{extra}\n'
        '[tools]\nplugins = ["tests.plugins.e2e_tools"]\napproval_timeout = 120\n'
    )
    return daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp / "agentd.toml"))


class Stack:
    def __init__(self, tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon) -> None:
        self.tg, self.llm, self.daemon = tg, llm, daemon

    def start(self, name: str, inp: dict[str, Any], *extra: str) -> dict[str, Any]:
        return self.daemon.cli_json("workflows", "start", name, "--input", json.dumps(inp), *extra)

    def wait(self, instance_id: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.daemon.cli("workflows", "wait", instance_id, "--timeout", str(timeout))

    def status(self, instance_id: str) -> str:
        return self.daemon.query(
            "SELECT status FROM workflow_instances WHERE id = ?", (instance_id,)
        )[0][0]

    def wait_status(self, instance_id: str, status: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.status(instance_id) != status:
            assert time.monotonic() < deadline, f"{instance_id}: {self.status(instance_id)}"
            time.sleep(0.05)

    def sent_to_owner(self, needle: str, timeout: float = 30) -> dict[str, Any]:
        return self.tg.wait_until(
            lambda: next(
                (m for m in self.tg.sent if m["chat_id"] == OWNER and needle in m["plain_text"]),
                None,
            ),
            timeout,
            f"a message with {needle!r}",
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("auto")
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        with running_daemon(tmp, automation_env(tmp, tg, llm)) as daemon:
            yield Stack(tg, llm, daemon)


def test_start_signal_wait_from_the_cli_while_the_daemon_runs(stack: Stack) -> None:
    started = stack.start("greet", {"name": "Ada"})
    assert started["created"] is True and started["version"] == "1"
    iid = started["instance_id"]
    stack.sent_to_owner("Hello, Ada!")
    stack.wait_status(iid, "waiting")
    waiting = stack.daemon.cli("workflows", "wait", iid, "--timeout", "0.3")
    assert waiting.returncode == 124, waiting  # still waiting for its event
    signalled = stack.daemon.cli_json(
        "workflows", "signal", iid, "go", "--data", '{"say": "ship it"}'
    )
    assert signalled["delivered"] is True
    done = stack.wait(iid)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "complete"
    assert result["output"] == {"text": "Hello, Ada!", "said": "ship it"}
    run = stack.daemon.query(
        "SELECT version, source FROM automation_runs WHERE instance_id = ?", (iid,)
    )
    assert tuple(run[0]) == ("1", "cli")
    shown = stack.daemon.cli_json("workflows", "show", iid)
    assert shown["version"] == "1" and [s["name"] for s in shown["steps"]] == [
        "hello:to",
        "hello",
        "wait:go",
    ]
    late = stack.daemon.cli("workflows", "signal", iid, "go")
    assert late.returncode == 1 and "already finished" in late.stderr


def test_automations_lists_what_loaded(stack: Stack) -> None:
    listed = stack.daemon.cli_json("workflows", "automations")
    by_name = {a["name"]: a for a in listed["automations"]}
    assert {"greet", "chain", "ask", "judge", "tidy", "bad_output"} <= set(by_name)
    assert by_name["greet"]["current"] == "1" and by_name["greet"]["tool"] == "run_greet (medium)"
    assert by_name["chain"]["current"].startswith("src-") and listed["problems"] == []


def test_the_same_key_starts_nothing_new(stack: Stack) -> None:
    first = stack.start("chain", {"tag": "keyed"}, "--key", "build-77")
    again = stack.start("chain", {"tag": "keyed"}, "--key", "build-77")
    assert again["instance_id"] == first["instance_id"] and again["created"] is False
    assert stack.wait(first["instance_id"]).returncode == 0
    assert stack.daemon.effects().count("keyed step1") == 1


def test_input_and_output_failures_name_the_field(stack: Stack) -> None:
    bad = stack.daemon.cli("workflows", "start", "greet", "--input", '{"times": "x"}')
    assert bad.returncode == 1
    assert "name: Field required" in bad.stderr and "times:" in bad.stderr
    unknown = stack.daemon.cli("workflows", "start", "nope")
    assert unknown.returncode == 1 and "no automation named 'nope'" in unknown.stderr
    notjson = stack.daemon.cli("workflows", "start", "greet", "--input", "{name")
    assert notjson.returncode == 1 and "not JSON" in notjson.stderr
    started = stack.start("bad_output", {})
    done = stack.wait(started["instance_id"])
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert (
        result["status"] == "errored"
        and "count: Input should be a valid integer" in (result["error"])
    )
    told = stack.sent_to_owner("Automation bad_output failed")
    assert "agentd workflows retry " + started["instance_id"] in told["plain_text"]
    # Told by a notice instance of its own, so the send is a journaled, marked step.
    notice = f"notice-failed-{started['instance_id']}-1"
    stack.wait_status(notice, "complete")


def test_run_from_chat_is_for_the_owner_and_ask_owner_takes_a_button(stack: Stack) -> None:
    stack.tg.add_chat(43)
    stack.tg.add_message(43, 43, '/run chain {"tag": "stranger"}')
    refused = stack.tg.wait_until(
        lambda: next((m for m in stack.tg.sent if m["chat_id"] == 43), None), 30, "a reply to 43"
    )
    assert "Only the owner" in refused["plain_text"]
    stack.tg.add_message(OWNER, OWNER, "/run not_loaded {}")
    unknown = stack.sent_to_owner("no automation named 'not_loaded'")
    assert "agentd automations reload" in unknown["plain_text"]  # the next command
    stack.tg.add_message(OWNER, OWNER, '/run ask {"question": "Deploy now?"}')
    reply = stack.sent_to_owner("Started ask")
    iid = reply["plain_text"].split(": ")[-1].strip()
    question = stack.sent_to_owner("Deploy now?")
    buttons = question["reply_markup"]["inline_keyboard"]
    assert [row[0]["text"] for row in buttons] == ["Yes", "No"]
    stack.tg.add_callback_query(43, OWNER, question["message_id"], buttons[0][0]["callback_data"])
    stack.tg.add_callback_query(
        OWNER, OWNER, question["message_id"], buttons[0][0]["callback_data"]
    )
    done = stack.wait(iid)
    assert json.loads(done.stdout)["output"] == {"choice": "Yes"}, done.stdout
    answers = [a["text"] for a in stack.tg.callback_answers]
    assert "Only the owner can answer this." in answers and "Answered: Yes." in answers
    assert stack.daemon.effects().count("answered Yes step0") == 1
    assert "stranger step1" not in stack.daemon.effects()


def test_ask_owner_from_the_cli_refuses_a_choice_not_offered(stack: Stack) -> None:
    iid = stack.start("ask", {"question": "Prune backups?"})["instance_id"]
    question = stack.sent_to_owner("Prune backups?")
    wrong = stack.daemon.cli(
        "workflows", "signal", iid, "answer:ask", "--data", '{"choice": "Maybe"}'
    )
    assert wrong.returncode == 1 and "choice must be one of ['Yes', 'No']" in wrong.stderr
    # The shell hint under the question works as printed, copied whole.
    hint = re.search(r"Or from the shell: (agentd workflows signal .+)$", question["plain_text"])
    assert hint, question["plain_text"]
    argv = shlex.split(hint[1])
    assert argv[:4] == ["agentd", "workflows", "signal", iid], argv
    ok = stack.daemon.cli(*argv[1:])
    assert ok.returncode == 0, ok.stderr
    assert json.loads(stack.wait(iid).stdout)["output"] == {"choice": "Yes"}


def test_step_llm_is_structured_and_costed(stack: Stack) -> None:
    def responder(body: dict[str, Any]) -> Any:
        if "judge-marker" in str(body["messages"][0]):
            assert body["tool_choice"] == {"type": "tool", "name": "answer"}
            verdict = {"verdict": "fine", "score": 7}
            return Reply(
                content=[tool_use_block("answer", verdict)],
                usage={"input_tokens": 120, "output_tokens": 30},
            )
        return None

    stack.llm.set_responder(responder)
    iid = stack.start("judge", {"text": "a tidy page"})["instance_id"]
    done = stack.wait(iid)
    assert json.loads(done.stdout)["output"] == {"verdict": "fine", "score": 7}, done.stdout
    usage = stack.daemon.query(
        "SELECT purpose, step, chat_id, input_tokens, output_tokens FROM llm_usage "
        "WHERE instance_id = ?",
        (iid,),
    )
    assert [tuple(r) for r in usage] == [("automation", "judge", OWNER, 120, 30)]


def test_step_llm_waits_for_the_daily_budget_like_a_turn(stack: Stack) -> None:
    """An automation's model calls are the owner's tokens: with today's budget spent ([limits]
    daily_tokens, 2 M by default), `step.llm` asks no model and the run fails with what to do;
    with the budget back it runs on from there."""
    asked: list[str] = []

    def responder(body: dict[str, Any]) -> Any:
        if "judge-marker" in str(body["messages"][0]):
            asked.append("judge")
            return Reply(
                content=[tool_use_block("answer", {"verdict": "late", "score": 1})],
                usage={"input_tokens": 10, "output_tokens": 5},
            )
        return None

    stack.llm.set_responder(responder)
    conn = open_sync(stack.daemon.db_path)
    try:
        with conn:  # today's spending, as an earlier loop would have left it
            conn.execute(
                "INSERT INTO llm_usage (at, chat_id, user_id, purpose, model, input_tokens, "
                "output_tokens) VALUES (?, ?, ?, 'turn', 'm', 2500000, 0)",
                (time.time(), OWNER, OWNER),
            )
        iid = stack.start("judge", {"text": "over budget"})["instance_id"]
        done = stack.wait(iid)
        result = json.loads(done.stdout)
        assert result["status"] == "errored" and "daily token budget" in result["error"]
        assert asked == []
        told = stack.sent_to_owner("Automation judge failed")
        assert "agentd workflows retry " + iid in told["plain_text"]
    finally:
        with conn:
            conn.execute("DELETE FROM llm_usage WHERE input_tokens = 2500000")
        conn.close()
    assert stack.daemon.cli("workflows", "retry", iid).returncode == 0
    assert json.loads(stack.wait(iid).stdout)["output"] == {"verdict": "late", "score": 1}
    assert asked == ["judge"]


def test_step_llm_answers_that_did_not_fit_are_costed_too(stack: Stack) -> None:
    """Each of the step's 3 tries asks twice for an answer that fits; all six came in words,
    and all six were paid for: the run fails, and each answer is in the ledger, a row each."""

    def responder(body: dict[str, Any]) -> Any:
        if "judge-marker" in str(body["messages"][0]):
            return Reply(
                content=[{"type": "text", "text": "Rather not."}],
                usage={"input_tokens": 120, "output_tokens": 30},
            )
        return None

    stack.llm.set_responder(responder)
    iid = stack.start("judge", {"text": "words only"})["instance_id"]
    assert json.loads(stack.wait(iid).stdout)["status"] == "errored"
    usage = stack.daemon.query(
        "SELECT purpose, step, input_tokens, output_tokens FROM llm_usage WHERE instance_id = ?",
        (iid,),
    )
    assert [tuple(r) for r in usage] == [("automation", "judge", 120, 30)] * 6


def test_step_llm_does_not_ask_again_once_its_first_answer_spent_the_budget(
    stack: Stack,
) -> None:
    """The step's first answer does not fit and costs 2.5 M tokens, past the owner's 2 M
    budget: the second ask is not made and the step is not tried again; the run fails with the
    budget's message, and the answer is in the ledger."""
    asked: list[str] = []

    def responder(body: dict[str, Any]) -> Any:
        if "judge-marker" in str(body["messages"][0]):
            asked.append("judge")
            return Reply(
                content=[{"type": "text", "text": "Rather not."}],
                usage={"input_tokens": 2_500_000, "output_tokens": 10},
            )
        return None

    stack.llm.set_responder(responder)
    iid = stack.start("judge", {"text": "costly words"})["instance_id"]
    try:
        result = json.loads(stack.wait(iid).stdout)
        assert result["status"] == "errored", result
        assert asked == ["judge"]
        assert "daily token budget ([limits] daily_tokens) is spent" in result["error"]
        assert "not asked again" in result["error"]
        usage = stack.daemon.query(
            "SELECT step, input_tokens, output_tokens FROM llm_usage WHERE instance_id = ?",
            (iid,),
        )
        assert [tuple(r) for r in usage] == [("judge", 2_500_000, 10)]
    finally:  # the module's other runs share the owner's budget
        conn = open_sync(stack.daemon.db_path)
        try:
            with conn:
                conn.execute("DELETE FROM llm_usage WHERE instance_id = ?", (iid,))
        finally:
            conn.close()


def test_step_llm_max_tokens_past_the_owners_cap_is_refused_unasked(stack: Stack) -> None:
    """`[llm] max_tokens` (2048 by default) caps an automation's answers too: a step.llm that
    asks for more fails before the model is asked, saying what to change; one within is sent."""
    sent: list[int] = []

    def responder(body: dict[str, Any]) -> Any:
        if "judge-marker" in str(body["messages"][0]):
            sent.append(body["max_tokens"])
            return Reply(content=[tool_use_block("answer", {"verdict": "ok", "score": 2})])
        return None

    stack.llm.set_responder(responder)
    iid = stack.start("judge", {"text": "long", "max_tokens": 100_000})["instance_id"]
    result = json.loads(stack.wait(iid).stdout)
    assert result["status"] == "errored", result
    assert "max_tokens=100000" in result["error"] and "[llm] max_tokens (2048)" in result["error"]
    assert sent == []
    assert stack.daemon.query("SELECT 1 FROM llm_usage WHERE instance_id = ?", (iid,)) == []
    within = stack.start("judge", {"text": "short", "max_tokens": 300})["instance_id"]
    assert json.loads(stack.wait(within).stdout)["status"] == "complete"
    assert sent == [300]


def test_step_tool_runs_medium_and_asks_before_high(stack: Stack) -> None:
    iid = stack.start("tidy", {"note": "n-1", "path": "/tmp/old"})["instance_id"]
    card = stack.sent_to_owner("delete_file")
    assert "Approval needed" in card["plain_text"] and "high risk" in card["plain_text"]
    assert "add_note n-1" in stack.daemon.effects()  # medium: ran without asking
    assert "delete_file /tmp/old" not in stack.daemon.effects()
    # A turn's card: the call as one escaped canonical line.
    assert '{"arguments": {"path": "/tmp/old"}, "tool": "delete_file"}' in card["plain_text"]
    approve = card["reply_markup"]["inline_keyboard"][0][0]
    assert approve["text"] == "✅ Approve"
    # Approvers' rules, as for a turn's card: 43 is allowed but not an approver.
    stack.tg.add_callback_query(43, OWNER, card["message_id"], approve["callback_data"])
    stack.tg.add_callback_query(OWNER, OWNER, card["message_id"], approve["callback_data"])
    done = stack.wait(iid)
    assert json.loads(done.stdout)["output"] == {"note": "note added", "removed": True}
    answers = [a["text"] for a in stack.tg.callback_answers]
    assert "Only the owner can approve this; nothing changed." in answers
    assert stack.daemon.effects().count("delete_file /tmp/old") == 1
    audit = stack.daemon.query(
        "SELECT detail FROM audit WHERE kind = 'tool_call' AND instance_id = ?", (iid,)
    )
    details = {json.loads(r[0])["tool"]: json.loads(r[0]) for r in audit}
    assert sorted(details) == ["add_note", "delete_file"]
    assert details["delete_file"]["decision"] == "approved"
    shown = stack.daemon.cli_json("workflows", "show", iid)
    names = [s["name"] for s in shown["steps"]]
    assert {"route:note", "tool:note", "route:remove", "ask:remove", "tool:remove"} <= set(names)


def test_the_model_can_start_a_workflow_that_declares_a_tool(stack: Stack) -> None:
    def responder(body: dict[str, Any]) -> Any:
        if "tool-marker" not in str(body["messages"][0]):
            return None
        assert "run_greet" in [t["name"] for t in body.get("tools", [])]
        assert "run_chain" not in [t["name"] for t in body.get("tools", [])]  # not declared
        if "tool_result" in str(body["messages"][-1]):
            return "Started it."
        return Reply(content=[tool_use_block("run_greet", {"name": "Model"})])

    stack.llm.set_responder(responder)
    stack.tg.add_message(OWNER, OWNER, "tool-marker: greet Model for me")
    stack.sent_to_owner("Hello, Model!")
    rows = stack.daemon.query("SELECT r.instance_id FROM automation_runs r WHERE r.source = 'tool'")
    assert len(rows) == 1
    stack.daemon.cli_json("workflows", "signal", rows[0][0], "go")
    assert stack.wait(rows[0][0]).returncode == 0
