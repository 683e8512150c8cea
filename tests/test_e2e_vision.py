"""End to end: photos are downloaded, downscaled, summarised once per hash, and replied to."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

SEEN = {
    "summary": "A receipt from Café Lumière for two coffees.",
    "entities": ["Café Lumière"],
    "tables": ["| item | price |\n| --- | --- |\n| coffee | 3.20 |"],
    "warnings": [],
}


def png(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, format="PNG")
    return out.getvalue()


def vision_reply(body: dict[str, Any]) -> Any:
    if body.get("tool_choice", {}).get("name") == "record_image_summary":
        return [
            {"type": "tool_use", "id": "toolu_v", "name": "record_image_summary", "input": SEEN}
        ]
    return None


def vision_requests(llm: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in llm.requests if r["body"].get("tool_choice")]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[FakeTelegram, FakeAnthropic, Any]]:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(vision_reply)
        with running_daemon(tmp_path, daemon_env(tmp_path, tg.base_url, llm.base_url)) as d:
            yield tg, llm, d


def test_the_same_photo_twice_is_seen_once(stack: tuple[FakeTelegram, FakeAnthropic, Any]) -> None:
    tg, llm, daemon = stack
    photo = png(3000, 2000)
    tg.add_photo(OWNER, OWNER, photo, caption="what did I pay?")
    tg.wait_for_sent(1, timeout=20)
    tg.add_photo(OWNER, OWNER, photo, caption="and this one?")
    tg.wait_for_sent(2, timeout=20)
    daemon.wait_for_instances(2)

    assert len(vision_requests(llm)) == 1  # the second photo came from the cache
    image_block = vision_requests(llm)[0]["body"]["messages"][0]["content"][0]
    assert image_block["type"] == "image"
    sent = Image.open(io.BytesIO(base64.b64decode(image_block["source"]["data"])))
    assert max(sent.size) <= 1568 and sent.size[0] * sent.size[1] <= 1_150_000
    turn_prompts = [r for r in llm.requests if not r["body"].get("tool_choice")]
    assert len(turn_prompts) == 2
    for request in turn_prompts:
        current = request["body"]["messages"][-1]["content"][0]["text"]
        assert "Café Lumière" in current and "<data>" in current
    rows = daemon.query("SELECT sha256, image FROM vision_cache")
    assert len(rows) == 1 and rows[0][1] is None  # raw bytes are not kept
    stored = daemon.cli_json("history")
    users = [m for m in stored if m["role"] == "user"]
    assert users[0]["meta"]["images"][0]["sha256"] == rows[0][0]
    assert "Café Lumière" in users[0]["content"]  # the summary is in the history too
    assert daemon.query("SELECT COUNT(*) FROM llm_usage WHERE purpose = 'vision'")[0][0] == 1
    # The cache's hits and misses are counted and shown per day and chat.
    assert [tuple(r) for r in daemon.query("SELECT hits, misses FROM vision_lookups")] == [(1, 1)]
    used = daemon.cli_json("usage")
    assert [(u["vision_cache_hits"], u["vision_cache_misses"]) for u in used] == [(1, 1)]
    # Each turn says why it was given what it was: here nothing to recall yet.
    detail = json.loads(daemon.query("SELECT detail FROM audit WHERE kind = 'turn'")[0][0])
    route = detail["route"]
    assert (route["recall"], route["recall_why"]) == ("skipped", "nothing to recall yet")
    assert route["documents"] and "search_docs" in route["tools"] and route["web"] == "none"
    assert route["reason"].startswith("recall skipped (nothing to recall yet); documents offered")


def test_a_reply_to_a_photo_brings_the_photo_in(
    stack: tuple[FakeTelegram, FakeAnthropic, Any],
) -> None:
    tg, llm, _ = stack
    tg.add_photo(OWNER, OWNER, png(400, 300, (10, 200, 10)))
    tg.wait_for_sent(1, timeout=20)
    photo_message = next(m for m in tg.chat_history(OWNER) if m.get("photo"))
    tg.add_message(OWNER, OWNER, "which café was that?", reply_to=photo_message["message_id"])
    tg.wait_for_sent(2, timeout=20)
    last = llm.requests[-1]["body"]["messages"][-1]["content"][0]["text"]
    assert "Image in the message being replied to" in last and "Café Lumière" in last
    assert len(vision_requests(llm)) == 1  # same bytes: cached


def test_a_broken_image_is_noted_and_the_turn_still_answers(
    stack: tuple[FakeTelegram, FakeAnthropic, Any],
) -> None:
    tg, llm, daemon = stack
    tg.add_photo(OWNER, OWNER, b"\x89PNG\r\n\x1a\n" + b"garbage" * 50, caption="look")
    reply = tg.wait_for_sent(1, timeout=20)[0]["plain_text"]
    assert reply.startswith("echo:")
    assert vision_requests(llm) == []
    last = llm.requests[-1]["body"]["messages"][-1]["content"][0]["text"]
    assert "could not be analysed" in last
    daemon.wait_for_instances(1)


def test_a_photo_replying_to_a_photo_brings_both_summaries(tmp_path: Path) -> None:
    seen = [
        {"summary": "A red bicycle leaning on a wall.", "entities": ["bicycle"]},
        {"summary": "A blue bicycle in a shop window.", "entities": ["bicycle shop"]},
    ]

    asked: list[int] = []

    def two_images(body: dict[str, Any]) -> Any:
        if body.get("tool_choice", {}).get("name") != "record_image_summary":
            return None
        asked.append(1)  # the red photo is seen first, the blue one second
        summary = seen[min(len(asked), 2) - 1]
        return [
            {"type": "tool_use", "id": "toolu_v", "name": "record_image_summary", "input": summary}
        ]

    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(two_images)
        env = daemon_env(tmp_path, tg.base_url, llm.base_url)
        with running_daemon(tmp_path, env) as daemon:
            tg.add_photo(OWNER, OWNER, png(400, 300, (200, 10, 10)), caption="mine")
            tg.wait_for_sent(1, timeout=20)
            first = next(m for m in tg.chat_history(OWNER) if m.get("photo"))
            blue = png(400, 300, (10, 10, 200))
            tg.add_photo(OWNER, OWNER, blue, caption="better?", reply_to=first["message_id"])
            tg.wait_for_sent(2, timeout=20)
            daemon.wait_for_instances(2)
    last = llm.requests[-1]["body"]["messages"][-1]["content"][0]["text"]
    assert "Image sent with this message: A blue bicycle" in last
    assert "Image in the message being replied to: A red bicycle" in last
    assert len(vision_requests(llm)) == 2  # the replied-to photo came from the cache
