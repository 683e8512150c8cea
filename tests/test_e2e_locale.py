"""End to end: the user's language comes from Telegram, /language overrides it, and every
model call's context says it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram


def context_of(request: dict[str, Any]) -> str:
    return str(request["body"]["messages"][-1]["content"][-1].get("text", ""))


def test_language_from_telegram_then_chosen_then_auto(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.user_languages[OWNER] = "de"
        with running_daemon(tmp_path, daemon_env(tmp_path, tg.base_url, llm.base_url)) as d:

            def say(text: str) -> str:
                before = len(tg.sent)
                tg.add_message(OWNER, OWNER, text)
                return str(tg.wait_for_sent(before + 1, timeout=30)[-1]["plain_text"])

            say("Hallo!")
            assert "The user's language: de." in context_of(llm.requests[-1])
            assert "de (from your Telegram settings)" in say("/language")
            assert "not a language code" in say("/language klingon!")
            assert say("/language fr").startswith("Language set to fr")
            say("Bonjour")
            assert "The user's language: fr." in context_of(llm.requests[-1])
            assert "fr (you chose it)" in say("/language")
            assert "follow your Telegram language" in say("/language auto")
            say("Noch mal")
            assert "The user's language: de." in context_of(llm.requests[-1])
            rows = d.query("SELECT telegram, chosen FROM user_locales WHERE user_id = ?", (OWNER,))
            assert [tuple(r) for r in rows] == [("de", None)]
