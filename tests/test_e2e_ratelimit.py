"""End to end (R-RATE-1): over a limit, one polite notice, the message saved, no model call:
neither the answer's nor a photo's look or a voice note's transcription."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram, FakeTranscription
from tests.test_e2e_media import CHAINED, KEY, SAID, SILENCE, VOICE
from tests.test_e2e_vision import png, vision_reply, vision_requests


def test_messages_per_minute(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp_path, tg.base_url, llm.base_url, AGENTD_LIMITS__MESSAGES_PER_MINUTE="2"
        )
        with running_daemon(tmp_path, env) as daemon:
            for n in range(5):
                tg.add_message(OWNER, OWNER, f"message {n}")
            daemon.wait_for_instances(5)
            # Over the limit a turn still runs (it saves the message and may send the notice):
            # once no turn is open, every notice and model call any of them makes was made.
            # (No marker message: it would be over the limit too.)
            daemon.wait_idle()
            texts = [m["plain_text"] for m in tg.sent]
            assert texts[:2] == ["echo: message 0", "echo: message 1"]
            assert len(texts) == 3 and "faster than I can take them" in texts[2]  # once
            assert len(llm.requests) == 2
            users = [m for m in daemon.cli_json("history") if m["role"] == "user"]
            assert len(users) == 5  # nothing lost
            rows = daemon.query("SELECT detail FROM audit WHERE kind = 'rate_limited'")
            assert ['"notified": true' in r[0] for r in rows] == [True, False, False]


def test_daily_token_budget(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_LIMITS__DAILY_TOKENS="1")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_message(OWNER, OWNER, "first")
            tg.wait_for_sent(1, timeout=20)
            tg.add_message(OWNER, OWNER, "second")
            tg.wait_for_sent(2, timeout=20)
            daemon.wait_for_instances(2)
            assert "today's token budget" in tg.sent[1]["plain_text"]
            assert len(llm.requests) == 1


def _user_rows(daemon: Any) -> list[tuple[str, str]]:
    """(content, meta) of every user message saved, in order."""
    rows = daemon.query("SELECT content, meta FROM messages WHERE role = 'user' ORDER BY id")
    return [(r[0], r[1]) for r in rows]


def test_photos_over_the_daily_budget_are_saved_not_looked_at(tmp_path: Path) -> None:
    """Looking at a photo is a model call: over a budget it is not made (docs/messages.md)."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(vision_reply)
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_LIMITS__DAILY_TOKENS="1")
        with running_daemon(tmp_path, env) as daemon:
            # Looked at: that look spends the whole budget, so its turn asks the model nothing
            # more and answers with the notice (the limits are asked again after a paid look).
            tg.add_photo(OWNER, OWNER, png(40, 40), caption="under")
            tg.wait_for_sent(1, timeout=20)
            assert len(vision_requests(llm)) == 1
            for n in range(3):  # three different photos, all over the budget
                tg.add_photo(OWNER, OWNER, png(41 + n, 40, (n * 60, 10, 10)), caption=f"p{n}")
            daemon.wait_for_instances(4)
            daemon.wait_idle()
            texts = [m["plain_text"] for m in tg.sent]
            assert len(texts) == 1 and "today's token budget" in texts[0]  # one notice
            assert len(vision_requests(llm)) == 1  # none past the budget
            used = daemon.query("SELECT purpose, COUNT(*) FROM llm_usage GROUP BY purpose")
            assert [tuple(r) for r in used] == [("vision", 1)]  # and no turn's call after it
            rows = _user_rows(daemon)
            assert len(rows) == 4  # every message saved
            assert "Café Lumière" in rows[0][0]  # the one under the budget was looked at
            for n, (content, meta) in enumerate(rows[1:]):
                assert content == f"[photo, not looked at: over the limit] p{n}"
                assert '"over_limit": "daily_tokens"' in meta


def test_voice_notes_over_the_rate_limit_are_saved_not_transcribed(tmp_path: Path) -> None:
    """A transcription is paid: over messages_per_minute the note is saved unheard."""
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as llm,
        FakeTranscription.running(api_key=KEY) as stt,
    ):
        env = daemon_env(
            tmp_path,
            tg.base_url,
            llm.base_url,
            AGENTD_LIMITS__MESSAGES_PER_MINUTE="1",
            AGENTD_MEDIA__TRANSCRIPTION="openai",
            AGENTD_MEDIA__TRANSCRIPTION_URL=stt.base_url + "/v1",
            AGENTD_MEDIA__TRANSCRIPTION_KEY_ENV="STT_KEY",
            STT_KEY=KEY,
        )
        later = [CHAINED, CHAINED + SILENCE]
        stt.says(VOICE, SAID)
        for n, audio in enumerate(later):
            stt.says(audio, f"{SAID} ({n})")
        with running_daemon(tmp_path, env) as daemon:
            tg.add_voice(OWNER, OWNER, VOICE, duration=4)  # the one message this minute
            tg.wait_for_sent(1, timeout=20)
            assert len(stt.transcribed()) == 1  # under the limit: heard
            for audio in later:
                tg.add_voice(OWNER, OWNER, audio, duration=2)
            daemon.wait_for_instances(3)
            daemon.wait_idle()
            texts = [m["plain_text"] for m in tg.sent]
            assert len(texts) == 2 and "faster than I can take them" in texts[1]
            assert len(stt.transcribed()) == 1  # none over the limit
            assert len(llm.requests) == 1
            rows = _user_rows(daemon)
            assert "oat milk" in rows[0][0]
            assert [c for c, _ in rows[1:]] == ["[voice note, not heard: over the limit]"] * 2
