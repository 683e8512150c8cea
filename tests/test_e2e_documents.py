"""End to end: ingest a folder with the CLI, then ask on Telegram; the answer cites its source."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

GUIDE = """# Home server guide

## Backups

The NAS runs a nightly backup at 02:30 to the external disk named VAULT.

## Printers

The office printer is called Heron and lives on the second floor.
"""


def test_ingest_then_answer_with_a_citation(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "guide.md").write_text(GUIDE)
    (notes / "broken.txt").write_bytes(b"\xff\xfe\x00 not utf-8 \xc3\x28")
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url)
        with running_daemon(tmp_path, env) as daemon:
            result = daemon.cli("ingest", str(notes), "--json")
            assert result.returncode == 1, result.stderr  # broken.txt failed
            report = json.loads(result.stdout)
            assert report["added"] == [str(notes / "guide.md")]
            assert [f["source"] for f in report["failed"]] == [str(notes / "broken.txt")]

            llm.enqueue_tool_use("search_docs", {"query": "when does the NAS backup run"}, "tu_d")

            cited: list[str] = []

            def cite(body: dict[str, Any]) -> Any:
                result = body["messages"][-1]["content"][0]["content"]
                assert "02:30" in result and "Backups" in result
                # One id the search returned, one it never did (a model's slip).
                cited.append(re.findall(r"\[(D\d+)\] Home server guide — Backups", result)[0])
                return f"At 02:30 every night [{cited[0]}], to VAULT [D999]."

            llm.set_responder(cite)
            tg.add_message(OWNER, OWNER, "when does the NAS back up?")
            reply = tg.wait_for_sent(1, timeout=20)[0]["plain_text"]
            guide = str(notes / "guide.md")
            assert (
                reply == f"At 02:30 every night (Home server guide — Backups, {guide}), to VAULT."
            )
            daemon.wait_for_instances(1)
            turn = json.loads(daemon.query("SELECT detail FROM audit WHERE kind = 'turn'")[0][0])
            assert turn["citations"] == {"used": cited, "dropped": ["D999"]}
            tool_result = llm.requests[-1]["body"]["messages"][-1]["content"][0]
            assert str(notes / "guide.md") in tool_result["content"]
            assert "<untrusted_content" in tool_result["content"]
            audit = daemon.query("SELECT detail FROM audit WHERE kind = 'retrieval'")
            assert len(audit) == 1 and "NAS backup" in audit[0][0]

            # Re-ingesting after an edit re-embeds only what changed.
            (notes / "guide.md").write_text(GUIDE.replace("Heron", "Kingfisher"))
            again = json.loads(daemon.cli("ingest", str(notes), "--json").stdout)
            assert again["changed"] == [str(notes / "guide.md")]
            assert again["chunks_embedded"] < 3
            listed = daemon.cli_json("docs", "ls")
            assert [(d["title"], d["status"]) for d in listed] == [
                ("broken.txt", "failed"),  # never read
                ("Home server guide", "ingested"),
            ]
