"""End to end: background summaries, facts in the prompt, per-user isolation, the memory CLI."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_process import Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

ALICE, BOB = 42, 43
SUMMARY = {
    "summary": "Alice talked about moving to Lyon and her cat Miso.",
    "facts": [{"kind": "fact", "key": "home_city", "content": "Lives in Lyon"}],
    "retract_keys": [],
}


def summary_reply(body: dict[str, Any]) -> Any:
    """Answer the summariser's forced tool call; echo everything else."""
    if body.get("tool_choice", {}).get("name") == "record_summary":
        return [{"type": "tool_use", "id": "toolu_sum", "name": "record_summary", "input": SUMMARY}]
    return None


@pytest.fixture
def fakes() -> Iterator[tuple[FakeTelegram, FakeAnthropic]]:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        yield tg, llm


def memory_env(tmp: Path, tg: FakeTelegram, llm: FakeAnthropic) -> dict[str, str]:
    return daemon_env(
        tmp,
        tg.base_url,
        llm.base_url,
        AGENTD_MEMORY__SUMMARY_THRESHOLD="4",
        AGENTD_MEMORY__SUMMARY_KEEP_RECENT="2",
    )


def chat(tg: FakeTelegram, user: int, texts: list[str]) -> None:
    for n, text in enumerate(texts, start=1):
        before = len([m for m in tg.sent if m["chat_id"] == user])
        tg.add_message(user, user, text)
        tg.wait_for_sent(before + 1, timeout=20, chat_id=user)
        del n


def system_text(request: dict[str, Any]) -> str:
    """The system prompt and the per-call context block (the newest message's last block)."""
    body = request["body"]
    context = body["messages"][-1]["content"][-1].get("text", "")
    return "\n".join([*(block["text"] for block in body["system"]), context])


def test_threshold_triggers_a_summary_after_the_reply(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    llm.set_responder(summary_reply)
    with running_daemon(tmp_path, memory_env(tmp_path, tg, llm)) as daemon:
        chat(tg, ALICE, ["I'm moving to Lyon", "My cat is called Miso", "Any tips for packing?"])
        daemon.wait_for_instances(4)  # three turns and one summary
        requests = llm.requests
        summary_at = next(i for i, r in enumerate(requests) if r["body"].get("tool_choice"))
        assert summary_at == 3  # after the third turn's answer, never inside a turn
        third_reply = [m for m in tg.sent if m["chat_id"] == ALICE][2]
        assert third_reply["time"] <= requests[summary_at]["time"]
        rows = daemon.query("SELECT kind, content, slot, user_id FROM memories ORDER BY id")
        assert [(r[0], r[2], r[3]) for r in rows] == [
            ("summary", None, ALICE),
            ("fact", "home_city", ALICE),
        ]
        context = daemon.query("SELECT context FROM memories WHERE kind = 'summary'")[0][0]
        assert re.fullmatch(r"Conversation of \d{1,2} [A-Z][a-z]+ 20\d\d( to .+)?", context)
        summarised = daemon.query("SELECT COUNT(*) FROM messages WHERE summarised = 1")[0][0]
        assert summarised == 4  # all but the two most recent; the raw messages stay
        assert daemon.query("SELECT COUNT(*) FROM messages")[0][0] == 6
        usage = daemon.query("SELECT purpose FROM llm_usage WHERE purpose = 'summary'")
        assert len(usage) == 1

        chat(tg, ALICE, ["Where do I live again? Lyon or Paris?"])
        prompt = system_text(llm.requests[-1])
        assert "Lives in Lyon" in prompt  # the fact, as data
        assert "moving to Lyon and her cat Miso" in prompt  # the recalled summary
        # …with when it was said, so "when did I…?" has a date to go by.
        assert re.search(r"\] \(Conversation of \d{1,2} [A-Z][a-z]+ 20\d\d[^)]*\) Alice", prompt)

        listed = daemon.cli_json("memory", "ls", "--user", str(ALICE))
        assert {m["kind"] for m in listed} == {"summary", "fact"}
        found = daemon.cli_json("memory", "search", "cat Miso", "--user", str(ALICE))
        assert found[0]["kind"] == "summary"
        assert daemon.cli_json("memory", "search", "cat Miso", "--user", str(BOB)) == []


def test_kill_9_during_summarisation_resumes_with_one_summary(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    env = memory_env(tmp_path, tg, llm)
    for text in ("one", "two", "three"):
        llm.enqueue_text(f"ok {text}")
    llm.enqueue_delay(60)  # the summary call hangs…
    daemon = Daemon(tmp_path, env).start()
    try:
        chat(tg, ALICE, ["one", "two", "three"])
        llm.wait_for_requests(4, timeout=20)
        daemon.kill9()  # …and the daemon dies in the middle of it
        llm.reset()
        llm.set_responder(summary_reply)
        daemon.start()
        daemon.wait_for_instances(4)
        assert daemon.query("SELECT COUNT(*) FROM memories WHERE kind = 'summary'")[0][0] == 1
        steps = daemon.query(
            "SELECT s.name, a.attempt, a.outcome FROM workflow_attempts a JOIN workflow_steps s "
            "USING (instance_id, ordinal) WHERE instance_id LIKE 'summary-%' ORDER BY a.ordinal"
        )
        assert [tuple(r) for r in steps] == [
            ("select", 1, "complete"),
            ("limits#1", 1, "complete"),  # the [limits] budgets, asked before the call
            # At-least-once steps journal no attempt before the call: the attempt
            # the process died in leaves no row; the re-run is attempt 1 and completes once.
            ("llm", 1, "complete"),
            ("embed", 1, "complete"),
            ("store", 1, "complete"),
        ]
        assert len([m for m in tg.sent if m["chat_id"] == ALICE]) == 3  # no reply repeated
    finally:
        daemon.stop()


def test_memories_never_cross_users(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    tg, llm = fakes
    llm.enqueue_tool_use(
        "remember",
        {"kind": "preference", "key": "drink", "content": "Likes oolong tea"},
        "toolu_rem",
    )
    llm.enqueue_text("I'll remember that.")
    llm.enqueue_tool_use("search_memory", {"query": "oolong tea drink"}, "toolu_bob")
    llm.enqueue_text("Nothing found.")
    with running_daemon(tmp_path, memory_env(tmp_path, tg, llm)) as daemon:
        chat(tg, ALICE, ["I like oolong tea, remember that"])
        chat(tg, BOB, ["what tea do I like?"])
        bob_requests = [r for r in llm.requests if "what tea" in str(r["body"]["messages"])]
        for request in bob_requests:
            assert "oolong" not in system_text(request)
        tool_result = bob_requests[-1]["body"]["messages"][-1]["content"][0]
        assert tool_result["type"] == "tool_result" and "oolong" not in tool_result["content"]
        assert "No matching memories" in tool_result["content"]
        chat(tg, ALICE, ["what do I drink?"])
        assert "Likes oolong tea" in system_text(llm.requests[-1])

        # The owner can forget: the row, its vector and its keyword entry go together.
        fact = daemon.cli_json("memory", "ls", "--user", str(ALICE))[0]
        assert daemon.cli("memory", "forget", str(fact["id"])).returncode == 0
        assert daemon.cli_json("memory", "search", "oolong", "--user", str(ALICE)) == []
        leftovers = daemon.query("SELECT COUNT(*) FROM memory_vectors")[0][0]
        assert leftovers == 0
        assert daemon.cli("memory", "forget", "--all").returncode == 2
        assert daemon.cli_json("memory", "forget", "--all", "--user", str(ALICE)) == {
            "forgotten": 0
        }


def test_reindex_after_the_default_embedder_changed(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    """A database written with `hashing` (the old default) meets the new default, e5-small:
    doctor names the stale vectors, both reindex commands re-embed, search finds by meaning."""
    tg, llm = fakes
    llm.enqueue_tool_use(
        "remember", {"kind": "fact", "key": "pet", "content": "Has a cat called Miso"}, "toolu_r"
    )
    llm.enqueue_text("Noted.")
    env = memory_env(tmp_path, tg, llm)
    notes = tmp_path / "notes.md"
    notes.write_text("# Garden\n\nThe tomatoes need watering every second evening.\n")
    with running_daemon(tmp_path, env) as daemon:
        chat(tg, ALICE, ["my cat is Miso"])
        assert daemon.cli("ingest", str(notes)).returncode == 0
        daemon.stop()
        del env["AGENTD_MEMORY__EMBEDDER"]  # back to the default
        before = daemon.query("SELECT model_id, dim FROM memory_spaces")
        checks = {c["check"]: c for c in daemon.cli_json("doctor")}
        assert checks["embedder"]["detail"] == "e5-small: e5-small-q4-c1/384 on onnxruntime"
        assert not checks["embedder"]["warn"]
        assert (
            checks["memory vectors"]["warn"]
            and "memory reindex" in checks["memory vectors"]["detail"]
        )
        assert checks["document vectors"]["warn"]
        report = daemon.cli_json("memory", "reindex")
        assert report["embedded"] >= 1 and report["dropped_spaces"] == ["hashing-v1/384"]
        docs = daemon.cli_json("docs", "reindex")
        assert docs["embedded"] == 1 and docs["dropped_spaces"] == ["hashing-v1/384"]
        after = daemon.query("SELECT model_id, dim FROM memory_spaces")
        assert [tuple(r) for r in before] == [("hashing-v1", 384)]
        assert [tuple(r) for r in after] == [("e5-small-q4-c1", 384)]
        checks = {c["check"]: c for c in daemon.cli_json("doctor")}
        assert not checks["memory vectors"]["warn"] and not checks["document vectors"]["warn"]
        found = daemon.cli_json(
            "memory",
            "search",
            "which animal lives with me",
            "--user",
            str(ALICE),
            "--mode",
            "vector",
        )
        assert found and found[0]["content"] == "Has a cat called Miso"
        hits = daemon.cli_json(
            "docs", "search", "plants in the vegetable patch", "--mode", "vector"
        )
        assert hits and "tomatoes" in hits[0]["text"]


def test_a_group_members_words_never_become_another_members_facts(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic]
) -> None:
    """A group's history holds every member's words; summarised for one member, the facts
    drawn from another's are outside content: they never join that member's private prompt,
    and never replace a fact of that member's own (kept beside it, unkeyed)."""
    from tests.daemon_process import TOKEN

    tg, llm = fakes
    llm.set_responder(summary_reply)
    group = -900
    env = memory_env(tmp_path, tg, llm)
    env["AGENTD_ACCESS__ALLOW_GROUPS"] = "true"
    with running_daemon(tmp_path, env) as daemon:
        own = ["memory", "add", "--kind", "fact", "--key", "home_city", "--user", str(ALICE)]
        added = daemon.cli(*own, "Lives in Paris")
        assert added.returncode == 0, added.stdout + added.stderr
        tg.add_bot_to_group(group, ALICE, int(TOKEN.split(":")[0]))
        for n, (user, text) in enumerate(
            [(BOB, "I live in Lyon now"), (BOB, "Lyon is home"), (ALICE, "ok, noted")], start=1
        ):
            tg.add_message(group, user, f"@fake_bot {text}", chat_type="group")
            tg.wait_for_sent(n, timeout=20, chat_id=group)
        daemon.wait_for_instances(4)  # three turns and one summary
        rows = daemon.query(
            "SELECT kind, user_id, origin, origin_ref, slot, content FROM memories ORDER BY id"
        )
        assert [(r[0], r[1], r[2], r[4], r[5]) for r in rows] == [
            ("fact", ALICE, "user", "home_city", "Lives in Paris"),
            ("summary", ALICE, "outside", None, SUMMARY["summary"]),
            ("fact", ALICE, "outside", None, "Lives in Lyon"),
        ]
        assert "another member's words" in rows[1][3]  # the summary says why
        chat(tg, ALICE, ["Where do I live?"])
        prompt = system_text(llm.requests[-1])
        assert "Lives in Paris" in prompt and "Lives in Lyon" not in prompt
