"""Transcription in the ledger: priced per minute of audio by the one price table, in the
totals `agentd usage`, /status and the dashboard give, and held by no token budget."""

from __future__ import annotations

from pathlib import Path

from agentd.access.ratelimit import tokens_used
from agentd.config.schema import LLMConfig
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.ledger import usage
from agentd.ledger.pricing import Tokens, cost, price_for
from agentd.llm.pricing import price_note, price_table
from agentd.media.transcribe import billed_seconds, stt_label


def test_openais_models_are_priced_per_minute_and_others_at_0_unless_set() -> None:
    table = price_table(LLMConfig())
    minute_and_a_half = Tokens(audio_seconds=90)
    openai = stt_label("https://api.openai.com/v1", "whisper-1")
    groq = stt_label("https://api.groq.com/openai/v1", "whisper-large-v3-turbo")
    assert (openai, groq) == ("stt:whisper-1", "stt:api.groq.com/whisper-large-v3-turbo")
    assert round(cost(minute_and_a_half, price_for(openai, table)), 6) == 0.009
    assert cost(minute_and_a_half, price_for(groq, table)) == 0
    priced = LLMConfig.model_validate(
        {
            "prices": {
                groq: {
                    "input": 0,
                    "output": 0,
                    "cache_read": 0,
                    "cache_write_5m": 0,
                    "cache_write_1h": 0,
                    "audio_minute": 0.04 / 60,
                }
            }
        }
    )
    assert round(cost(minute_and_a_half, price_for(groq, price_table(priced))), 6) == 0.001
    assert price_note(groq, LLMConfig()).startswith("0 unless")


def test_billed_seconds_are_read_only_from_a_duration_usage() -> None:
    assert billed_seconds({"text": "x", "usage": {"type": "duration", "seconds": 9}}) == 9.0
    assert billed_seconds({"text": "x", "usage": {"type": "tokens", "input_tokens": 9}}) is None
    assert billed_seconds({"text": "x"}) is None


def test_a_transcriptions_minutes_are_in_the_totals_and_no_token_budget(tmp_path: Path) -> None:
    conn = open_sync(tmp_path / "a.db")
    apply_migrations(conn)
    with conn:
        usage.record(conn, Tokens(input_tokens=100), model="claude-haiku-4-5", purpose="turn")
        usage.record(
            conn,
            Tokens(audio_seconds=60),
            model="stt:whisper-1",
            purpose=usage.TRANSCRIPTION,
            chat_id=7,
            user_id=7,
        )
    [report] = usage.report(usage.totals(conn, chat_id=7), price_table(LLMConfig()))
    assert report.audio_seconds == 60 and report.estimated_cost_usd == 0.006
    assert tokens_used(conn, 0) == 100
    conn.close()
