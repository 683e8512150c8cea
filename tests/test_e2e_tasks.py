"""End to end: background tasks (docs/messages.md, "Tasks in the background") through
`agentd run`: started at once, their results as replies, after a restart too; a child's
high-risk call asks the owner; cancelling a parent cancels its children; a budget stops a
runaway child, and the user's [limits] daily budget stops a task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import OWNER
from tests.fakes.anthropic import last_user_text
from tests.owner_chat import OwnerChat, owner_chat_running

CONFIG = f"""
[access]
owner_id = {OWNER}
allowed_user_ids = [{OWNER}]

[tools]
plugins = ["tests.plugins.e2e_tools"]
approval_timeout = 600

[tasks]
max_steps = 40
max_running = 4
"""
Responder = Callable[[dict[str, Any]], Any]


def first_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def is_task(body: dict[str, Any]) -> bool:
    return first_text(body).startswith("Task:\n")


def use(name: str, use_id: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": args}


class Stack(OwnerChat):
    def replies_to(self, message_id: int) -> list[dict[str, Any]]:
        return [m for m in self.sent() if m.get("reply_to_message_id") == message_id]

    def wait_replies(self, message_id: int, n: int, what: str) -> list[dict[str, Any]]:
        return self.tg.wait_until(  # type: ignore[no-any-return]
            lambda: len(r := self.replies_to(message_id)) >= n and r, 90, what
        )

    def cards(self, marker: str, n: int = 1) -> list[dict[str, Any]]:
        return self.tg.wait_until(  # type: ignore[no-any-return]
            lambda: (
                len(
                    c := [m for m in self.sent() if m["reply_markup"] and marker in m["plain_text"]]
                )
                >= n
                and c
            ),
            90,
            f"{n} card(s) for {marker}",
        )

    def approve(self, card: dict[str, Any]) -> None:
        data = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        self.tg.add_callback_query(OWNER, OWNER, card["message_id"], data)

    def tasks(self) -> list[dict[str, Any]]:
        return self.daemon.cli_json("tasks", "ls")  # type: ignore[no-any-return]

    def task_requests(self, marker: str) -> list[dict[str, Any]]:
        return [r["body"] for r in self.llm.requests if marker in first_text(r["body"])]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("tasks")
    with owner_chat_running(tmp, CONFIG, Stack, users_in_config=True) as stack:
        yield stack


def test_a_task_result_arrives_after_a_restart(stack: Stack) -> None:
    s = stack

    def responder(body: dict[str, Any]) -> Any:
        if is_task(body) and "restart-brief" in first_text(body):
            return "The restart-brief result."
        return None

    s.llm.set_responder(responder)
    s.llm.hold()
    try:
        asked = s.ask("/task restart-brief: look it up")
        started = s.wait_replies(asked, 1, "the /task reply")[0]
        assert started["plain_text"].startswith("Started task-")
        s.llm.wait_for_held(1, timeout=60)
        # The reply's step journaled (else a kill may fall in the documented send window).
        s.tg.wait_until(
            lambda: s.daemon.query(
                "SELECT 1 FROM workflow_instances WHERE workflow = 'command' AND status = "
                "'complete' AND json_extract(input, '$.message_id') = ?",
                (asked,),
            ),
            30,
            "the /task command finished",
        )
        s.daemon.kill9()
    finally:
        s.llm.release()
    s.daemon.start()
    replies = s.wait_replies(asked, 2, "the task's result")
    assert "The restart-brief result." in replies[1]["plain_text"]
    s.daemon.wait_idle()
    assert len(s.replies_to(asked)) == 2  # "started", then the result once
    (task,) = [t for t in s.tasks() if "restart-brief" in t["text"]]
    assert task["status"] == "complete" and task["model_calls"] == 1 and task["tokens"] > 0


def test_a_result_longer_than_one_message_arrives_in_parts(stack: Stack) -> None:
    s = stack
    paragraphs = [f"Finding {n}: " + "details " * 60 for n in range(15)]  # ~7,000 characters

    def responder(body: dict[str, Any]) -> Any:
        if is_task(body) and "long-brief" in first_text(body):
            return "\n\n".join(paragraphs)
        return None

    s.llm.set_responder(responder)
    asked = s.ask("/task long-brief: write it all up")
    s.wait_replies(asked, 2, "the /task reply and the result's first part")
    last = s.tg.wait_until(
        lambda: next((m for m in s.sent() if "Finding 14:" in m["plain_text"]), None),
        60,
        "the result's last part",
    )
    s.daemon.wait_idle()
    result = [m for m in s.sent() if m["message_id"] >= s.replies_to(asked)[1]["message_id"]]
    assert result[0]["plain_text"].startswith("Task done") and result[-1] == last
    assert all(p.strip() in "\n".join(m["plain_text"] for m in result) for p in paragraphs)
    (task,) = [t for t in s.tasks() if "long-brief" in t["text"]]
    assert task["status"] == "complete"


def test_a_turn_delegates_two_children_and_answers_at_once(stack: Stack) -> None:
    s = stack

    def responder(body: dict[str, Any]) -> Any:
        text = last_user_text(body)
        if is_task(body):
            part = "north" if "split-north" in first_text(body) else "south"
            return f"Findings for the {part}."
        if text.endswith("research both halves"):
            return [
                use("delegate", "toolu_split1", task="split-north half", tools=["count_words"]),
                use("delegate", "toolu_split2", task="split-south half", tools=["count_words"]),
            ]
        if text.startswith("tool_result:") and "Started task" in text:
            return "Both halves are being researched."
        return None

    s.llm.set_responder(responder)
    asked = s.ask("research both halves")
    replies = s.wait_replies(asked, 3, "the answer and two results")
    # The turn did not wait for them (fast as they are here, they may even come first).
    texts = [r["plain_text"] for r in replies]
    answers = [t for t in texts if t.startswith("Both halves are being researched.")]
    assert len(answers) == 1 and "delegate" in answers[0]  # reported, as a medium-risk call
    assert sorted(t.split("\n\n", 1)[1] for t in texts if t.startswith("Task done")) == [
        "Findings for the north.",
        "Findings for the south.",
    ]
    # Their usage is the chat's and the user's.
    rows = s.daemon.query(
        "SELECT chat_id, user_id FROM llm_usage WHERE purpose = 'task' AND instance_id IN "
        "(SELECT id FROM workflow_instances WHERE input LIKE '%split-%')"
    )
    assert len(rows) == 2 and {tuple(r) for r in rows} == {(OWNER, OWNER)}
    children = [t for t in s.tasks() if "split-" in t["text"]]
    assert len(children) == 2 and all(t["parent"].startswith("tg-update-") for t in children)


def test_a_child_that_tries_a_high_risk_tool_asks(stack: Stack) -> None:
    s = stack
    path = "/tmp/task-risky"

    def responder(body: dict[str, Any]) -> Any:
        if is_task(body) and "risky-brief" in first_text(body):
            if last_user_text(body).startswith("tool_result:"):
                return "Removed it."
            return [use("delete_file", "toolu_task_del", path=path)]
        return None

    s.llm.set_responder(responder)
    asked = s.ask(f"/task risky-brief: remove {path}")
    (card,) = s.cards(path)
    assert f"delete_file {path}" not in s.daemon.effects()
    s.approve(card)
    replies = s.wait_replies(asked, 2, "the task's result")
    assert "Removed it." in replies[1]["plain_text"]
    assert s.daemon.effects().count(f"delete_file {path}") == 1


def test_cancelling_a_parent_cancels_its_children(stack: Stack) -> None:
    s = stack

    def responder(body: dict[str, Any]) -> Any:
        first, text = first_text(body), last_user_text(body)
        if not is_task(body):
            return None
        if "family-parent" in first and not text.startswith("tool_result:"):
            return [
                use("delegate", "toolu_kid1", task="family-kid one"),
                use("delegate", "toolu_kid2", task="family-kid two"),
                use("delete_file", "toolu_parent_del", path="/tmp/family-parent"),
            ]
        if "family-kid" in first and not text.startswith("tool_result:"):
            which = "one" if "one" in first else "two"
            return [use("delete_file", f"toolu_kid_del_{which}", path=f"/tmp/family-{which}")]
        return "family done"

    s.llm.set_responder(responder)
    asked = s.ask("/task family-parent: split it")
    s.cards("/tmp/family-", 3)  # the parent and both children wait for the owner
    listing = s.ask("/tasks")
    listed = s.wait_replies(listing, 1, "the /tasks list")[0]["plain_text"]
    lines = [line for line in listed.splitlines() if "family-" in line]
    assert len(lines) == 3 and all("model calls" in x and "≈ $" in x for x in lines)
    parent = next(t for t in s.tasks() if "family-parent" in t["text"])
    result = s.daemon.cli_json("tasks", "cancel", parent["id"])
    assert len(result["cancelled"]) == 3
    s.tg.wait_until(
        lambda: all(t["status"] == "cancelled" for t in s.tasks() if "family-" in t["text"]),
        60,
        "the parent and its children cancelled",
    )
    assert not [e for e in s.daemon.effects() if "/tmp/family-" in e]
    assert len(s.replies_to(asked)) == 1  # "started"; no result from a cancelled task


def test_a_budget_stops_a_runaway_child(stack: Stack) -> None:
    s = stack
    calls = iter(range(1000))

    def responder(body: dict[str, Any]) -> Any:
        if is_task(body) and "runaway-brief" in first_text(body):
            return [use("count_words", f"toolu_run{next(calls)}", text="again and again")]
        if last_user_text(body).endswith("start the runaway"):
            return [
                use(
                    "delegate",
                    "toolu_runaway",
                    task="runaway-brief",
                    tools=["count_words"],
                    token_budget=3000,
                )
            ]
        if last_user_text(body).startswith("tool_result:"):
            return "Started it."
        return None

    s.llm.set_responder(responder)
    asked = s.ask("start the runaway")
    replies = s.wait_replies(asked, 2, "the answer and the stopped task's result")
    result = replies[1]["plain_text"]
    assert "budget is 3,000" in result
    made = len(s.task_requests("runaway-brief"))
    assert 1 <= made < 40  # the step limit was not what stopped it
    (task,) = [t for t in s.tasks() if "runaway-brief" in t["text"]]
    assert task["status"] == "complete" and task["tokens"] >= 3000


LIMITED = f"""
[access]
owner_id = {OWNER}
allowed_user_ids = [{OWNER}]

[tools]
plugins = ["tests.plugins.e2e_tools"]

[limits]
daily_tokens = 450

[tasks]
max_steps = 12
"""
# Every call of this test costs 100 tokens, whatever its prompt.
HUNDRED = {
    "input_tokens": 90,
    "output_tokens": 10,
    "cache_read_input_tokens": 0,
    "cache_creation_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
}


def test_a_task_stops_at_its_users_daily_budget(tmp_path: Path) -> None:
    """A task's tokens count to its user's [limits] daily_tokens, and the budget holds the
    task as it holds a turn: it works under it and makes no call past it."""
    with owner_chat_running(tmp_path, LIMITED, Stack, users_in_config=True) as s:
        calls = iter(range(1000))

        def responder(body: dict[str, Any]) -> Any:
            if is_task(body) and "thrifty-brief" in first_text(body):
                content = [use("count_words", f"toolu_t{next(calls)}", text="again")]
            elif last_user_text(body).endswith("start the thrifty one"):
                content = [use("delegate", "toolu_d", task="thrifty-brief", tools=["count_words"])]
            elif last_user_text(body).startswith("tool_result:"):
                content = [{"type": "text", "text": "Started it."}]
            else:
                return None
            return {"content": content, "usage": HUNDRED}

        s.llm.set_responder(responder)
        asked = s.ask("start the thrifty one")
        replies = s.wait_replies(asked, 2, "the answer and the stopped task's result")
        (result,) = [m["plain_text"] for m in replies if "Task done" in m["plain_text"]]
        assert "today's token budget for you ([limits] daily_tokens, 450) is spent" in result
        # The turn's two calls and the task's share 450 tokens at 100 a call: a call is made
        # while under 450, so 3 of the task's (4 if it asked before the turn's second call was
        # recorded), never its 12.
        made = len(s.task_requests("thrifty-brief"))
        assert made in (3, 4), made
        assert f"Stopped before model call {made + 1}" in result
        (task,) = [t for t in s.tasks() if "thrifty-brief" in t["text"]]
        assert task["status"] == "complete"
        # The user is over the budget too: the next message gets the notice, no call.
        before = len(s.llm.requests)
        s.ask("hello again")
        s.tg.wait_until(
            lambda: any("I've used today's token budget" in m["plain_text"] for m in s.sent()),
            30,
            "the notice",
        )
        assert len(s.llm.requests) == before
