"""A busy chat: how long a message waits for its answer while the chat has N turns waiting
for approval or N background tasks working, against an idle chat in the same run; and a
research task split into K background tasks against one turn doing it step by step.

    .venv/bin/python benchmarks/busy_chat.py [--waiting 5] [--rounds 10] [--parts 4]
        [--latency 0.3]

Part 1 alternates a message to an idle chat and one to the busy chat (the owner's own chat,
with N approval cards left open, then N tasks whose every model call takes --latency s) and
prints the median latency of each and their ratio. Part 2 gives the fake model a latency of
--latency s per call and times, for K parts, one turn that researches them in turn (a tool
call per part) and one that delegates each part to a task of its own, until the last result
arrives; tokens are summed from llm_usage.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import Reply, last_user_text, text_reply

IDLE = 43  # the other allowed user's private chat: nothing else happens there
CONFIG = f"""
[telegram]
owner_id = {OWNER}
allowed_user_ids = [{OWNER}, {IDLE}]

[llm]
max_steps = 20

[limits]
messages_per_minute = 0
daily_tokens = 0
daily_tokens_total = 0

[tools]
plugins = ["tests.plugins.e2e_tools"]
approval_timeout = 3600

[tasks]
max_running = 16
max_steps = 100
token_budget = 100000000
"""


def first_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def use(name: str, use_id: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": name, "input": args}


class Model:
    """The fake model's answers for both parts; `latency` is applied where the part says."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.task_latency = latency

    def __call__(self, body: dict[str, Any]) -> Any:
        text, first = last_user_text(body), first_text(body)
        results = sum(
            1
            for m in body["messages"]
            if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        )
        if first.startswith("Task:\n"):
            return self.task(first, text, results)
        if text.endswith("(card)"):
            return [use("delete_file", f"toolu_card{abs(hash(text))}", path=text)]
        asked = self.asked_in_turn(body)
        if asked is not None:
            return self.in_turn(*asked)
        if text.endswith("research split"):
            parts = int(text.split()[0])
            calls = [use("delegate", f"toolu_part{i}", task=f"part {i}") for i in range(parts)]
            return Reply(content=calls, delay=self.latency)
        if "Started task" in text:
            return Reply(content=text_reply("Started.").content, delay=self.latency)
        return None

    def task(self, first: str, text: str, results: int) -> Any:
        if first.startswith("Task:\nbusy"):  # a busy-chat task: works until cancelled
            call = use("count_words", f"toolu_busy{results}", text="busy work")
            return Reply(content=[call], delay=self.task_latency)
        if results == 0:
            call = use("count_words", "toolu_read", text=f"{first} source text")
            return Reply(content=[call], delay=self.latency)
        return Reply(content=text_reply(f"Findings of {first[6:]}.").content, delay=self.latency)

    @staticmethod
    def asked_in_turn(body: dict[str, Any]) -> tuple[int, int] | None:
        """(parts, results so far) while the turn that researches in turn works."""
        messages = body["messages"]
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            content = m["content"]
            said = (
                content
                if isinstance(content, str)
                else " ".join(b.get("text", "") for b in content if b.get("type") == "text")
            )
            if (
                m["role"] == "user"
                and "research in turn" in said
                and i >= len(messages) - 1 - 2 * 20
            ):
                done = sum(
                    1
                    for later in messages[i + 1 :]
                    if isinstance(later["content"], list)
                    for b in later["content"]
                    if b.get("type") == "tool_result"
                )
                tail_is_ours = i == len(messages) - 1 or "toolu_seq" in str(messages[i + 1 :])
                return (int(said.split()[0]), done) if tail_is_ours else None
        return None

    def in_turn(self, parts: int, results: int) -> Any:
        if results < parts:
            call = use("count_words", f"toolu_seq{results}", text=f"part {results} source text")
            return Reply(content=[call], delay=self.latency)
        return Reply(content=text_reply("All parts researched.").content, delay=self.latency)


def answer_time(tg: FakeTelegram, chat: int, text: str) -> float:
    before = len(tg.sent)
    started = time.monotonic()
    tg.add_message(chat, chat, text)
    try:
        tg.wait_until(
            lambda: any(
                m["chat_id"] == chat and m["plain_text"].endswith(text) for m in tg.sent[before:]
            ),
            60,
            f"the answer to {text!r}",
        )
    except TimeoutError:
        print([m["plain_text"][-200:] for m in tg.sent[-6:]], file=sys.stderr)
        raise
    return time.monotonic() - started


def latencies(tg: FakeTelegram, rounds: int, label: str) -> tuple[float, float]:
    idle, busy = [], []
    for n in range(rounds):
        idle.append(answer_time(tg, IDLE, f"{label} idle {n}"))
        busy.append(answer_time(tg, OWNER, f"{label} busy {n}"))
    return statistics.median(idle) * 1000, statistics.median(busy) * 1000


def part_one(tg: FakeTelegram, daemon: Daemon, args: argparse.Namespace, model: Model) -> None:
    model.latency = 0.0
    idle, base = latencies(tg, args.rounds, "warm")
    print(f"both chats idle:            idle {idle:6.1f} ms  other {base:6.1f} ms")
    for n in range(args.waiting):
        tg.add_message(OWNER, OWNER, f"/tmp/wait-{n} (card)")
    tg.wait_until(lambda: len([m for m in tg.sent if m["reply_markup"]]) >= args.waiting, 120, "")
    idle, busy = latencies(tg, args.rounds, "cards")
    print(
        f"{args.waiting} approval cards waiting:   idle {idle:6.1f} ms  busy {busy:6.1f} ms  "
        f"ratio {busy / idle:.2f}"
    )
    model.latency = args.latency
    for n in range(args.waiting):
        tg.add_message(OWNER, OWNER, f"/task busy work {n}")
    open_tasks = "SELECT COUNT(*) FROM workflow_instances WHERE workflow = 'task' AND status = ?"
    tg.wait_until(
        lambda: daemon.query(open_tasks, ("running",))[0][0] >= args.waiting, 120, "the tasks"
    )
    model.latency = 0.0  # the chat's own answers are instant; the tasks' calls slow
    model.task_latency = args.latency
    idle, busy = latencies(tg, args.rounds, "tasks")
    still = sum(daemon.query(open_tasks, (s,))[0][0] for s in ("running", "queued"))
    print(
        f"{args.waiting} tasks working:          idle {idle:6.1f} ms  busy {busy:6.1f} ms  "
        f"ratio {busy / idle:.2f} ({still} still working at the end)"
    )
    for row in daemon.cli_json("tasks", "ls", "--open"):
        daemon.cli("tasks", "cancel", row["id"])


def tokens_of(daemon: Daemon, like: str) -> int:
    row = daemon.query(
        "SELECT COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + "
        "cache_write_tokens), 0) FROM llm_usage WHERE instance_id IN (SELECT id FROM "
        "workflow_instances WHERE input LIKE ?)",
        (f"%{like}%",),
    )
    return int(row[0][0])


def part_two(tg: FakeTelegram, daemon: Daemon, args: argparse.Namespace, model: Model) -> None:
    model.latency = args.latency
    k = args.parts
    before = len(tg.sent)
    started = time.monotonic()
    tg.add_message(IDLE, IDLE, f"{k} parts: research in turn")
    tg.wait_until(
        lambda: any(m["plain_text"] == "All parts researched." for m in tg.sent[before:]), 300, ""
    )
    in_turn = time.monotonic() - started
    before = len(tg.sent)
    started = time.monotonic()
    tg.add_message(IDLE, IDLE, f"{k} parts: research split")
    tg.wait_until(
        lambda: sum(m["plain_text"].startswith("Task done") for m in tg.sent[before:]) >= k, 300, ""
    )
    split = time.monotonic() - started
    seq_tokens = tokens_of(daemon, "research in turn")
    split_tokens = tokens_of(daemon, "research split") + tokens_of(daemon, '"text":"part ')
    print(
        f"{k} parts, model latency {args.latency:.2f} s: one turn {in_turn:5.2f} s, "
        f"{seq_tokens:,} tokens; {k} tasks {split:5.2f} s, {split_tokens:,} tokens "
        f"(wall ×{in_turn / split:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=5, help="cards left open, tasks running")
    parser.add_argument("--rounds", type=int, default=10, help="messages per chat and phase")
    parser.add_argument("--parts", type=int, default=4, help="K: parts of the research task")
    parser.add_argument("--latency", type=float, default=0.3, help="s per model call (part 2)")
    args = parser.parse_args()
    model = Model(args.latency)
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as llm,
    ):
        path = Path(tmp)
        (path / "agentd.toml").write_text(CONFIG)
        env = daemon_env(
            path,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(path / "agentd.toml"),
            AGENTD_CHAT__STREAMING="false",
        )
        del env["AGENTD_ACCESS__ALLOWED_USER_IDS"]
        tg.add_chat(OWNER, "private", OWNER)
        llm.set_responder(model)
        daemon = Daemon(path, env).start()
        try:
            print(f"load average {os.getloadavg()[0]:.1f}")
            part_one(tg, daemon, args, model)
            part_two(tg, daemon, args, model)
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
