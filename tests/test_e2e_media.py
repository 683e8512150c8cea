"""End to end: voice notes transcribed once, documents read in chat, files sent back.

One daemon serves the module (users kept apart by chat); a second, without a transcription
backend, checks the reply that says how to enable one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentd.media.voice import FAILED_REPLY, NOT_HEARD_REPLY
from tests.daemon_process import Daemon, daemon_env, poll, running_daemon
from tests.docs_support import make_pdf
from tests.fakes import FakeAnthropic, FakeTelegram, FakeTranscription

DATA = Path(__file__).parent / "data" / "media"
VOICE = (DATA / "voice_note.ogg").read_bytes()  # espeak-ng + opusenc, see test_media_transcribe
SILENCE = (DATA / "silence.ogg").read_bytes()  # sox -n … trim 0 1.5; opusenc --bitrate 6
CHAINED = VOICE + SILENCE  # a chained Ogg stream: real audio, and another sha256
SAID = "Remind me to buy oat milk and call the plumber tomorrow morning."
KEY = "sk-stt-e2e-key-0123456789"
USERS = list(range(201, 210))


@dataclass
class Stack:
    tg: FakeTelegram
    llm: FakeAnthropic
    stt: FakeTranscription
    daemon: Daemon

    def sent(self, chat: int) -> list[dict[str, Any]]:
        return [m for m in self.tg.sent if m["chat_id"] == chat]

    def wait_sent(self, chat: int, n: int, timeout: float = 20) -> list[dict[str, Any]]:
        return self.tg.wait_until(
            lambda: (s := self.sent(chat)) and len(s) >= n and s, timeout, f"{n} messages to {chat}"
        )

    def prompts_with(self, needle: str) -> list[str]:
        lasts = [_last_user_text(r["body"]) for r in self.llm.requests]
        return [text for text in lasts if needle in text]


def _last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text") or b.get("content") or "") for b in content)


def respond(body: dict[str, Any]) -> Any:
    last = _last_user_text(body)
    if "oat milk" in last:
        return "Noted: oat milk and the plumber."
    if "boiler code" in last.lower():
        return "The boiler code is 4711."
    if "weekly report" in last:
        return [{"type": "tool_use", "id": "tu_rep", "name": "weekly_report", "input": {"week": 3}}]
    if "report-week-3.csv" in last:
        return "Here is your report."
    if "keep this one" in last:
        doc_id = last.split('document_id "')[1].split('"')[0]
        return [
            {
                "type": "tool_use",
                "id": "tu_keep",
                "name": "save_chat_document",
                "input": {"document_id": doc_id},
            }
        ]
    if "to your documents" in last:
        return "Kept."
    return None  # echo


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("media")
    (tmp / "agentd.toml").write_text('[tools]\nplugins = ["tests.plugins.media_tools"]\n')
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as llm,
        FakeTranscription.running(api_key=KEY) as stt,
    ):
        llm.set_responder(respond)
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_ACCESS__ALLOWED_USER_IDS=str(USERS),
            AGENTD_MEDIA__TRANSCRIPTION="openai",
            AGENTD_MEDIA__TRANSCRIPTION_URL=stt.base_url + "/v1",
            AGENTD_MEDIA__TRANSCRIPTION_KEY_ENV="STT_KEY",
            AGENTD_MEDIA__TRANSCRIPTION_RETRIES="2",
            AGENTD_MEDIA__ECHO_TRANSCRIPT="true",
            STT_KEY=KEY,
        )
        with running_daemon(tmp, env) as daemon:
            yield Stack(tg, llm, stt, daemon)


def test_the_same_voice_note_twice_is_transcribed_once(stack: Stack) -> None:
    user = 201
    stack.stt.says(VOICE, SAID)
    stack.tg.add_voice(user, user, VOICE, duration=4)
    stack.wait_sent(user, 2)
    stack.tg.add_voice(user, user, VOICE, duration=4)
    echo, answer, echo2, answer2 = stack.wait_sent(user, 4)
    assert len([r for r in stack.stt.transcribed() if r["sha256"] == _sha(VOICE)]) == 1
    assert SAID in echo["plain_text"] and echo["reply_to_message_id"] is not None
    assert SAID in echo2["plain_text"]
    assert answer["plain_text"] == answer2["plain_text"] == "Noted: oat milk and the plumber."
    prompts = stack.prompts_with(SAID)
    assert len(prompts) == 2 and "[transcript of the user's voice note]" in prompts[0]
    users = [
        m for m in stack.daemon.cli_json("history", "--chat", str(user)) if m["role"] == "user"
    ]
    assert SAID in users[0]["content"] and users[0]["meta"]["sha256"] == _sha(VOICE)
    assert users[0]["meta"]["file_id"] and users[1]["meta"]["transcript_cached"] is True
    rows = stack.daemon.query(
        "SELECT text, dropped FROM transcript_cache WHERE sha256 = ?", (_sha(VOICE),)
    )
    assert [tuple(r) for r in rows] == [(SAID, 0)]
    # Heard once, billed once: its minutes in the ledger, as the service said (5 s, not the 4
    # the chat said), counted to the user; a local server's model is priced at 0 unless set.
    heard = stack.daemon.query(
        "SELECT model, user_id, audio_seconds, input_tokens + output_tokens FROM llm_usage "
        "WHERE purpose = 'transcription' AND chat_id = ?",
        (user,),
    )
    assert [tuple(r) for r in heard] == [("stt:127.0.0.1/whisper-1", user, 5.0, 0)]


def test_silence_heard_as_a_stock_phrase_is_dropped_not_answered(stack: Stack) -> None:
    user = 202
    stack.stt.says(SILENCE, " Thank you. ")
    stack.tg.add_voice(user, user, SILENCE, duration=1)
    [reply] = stack.wait_sent(user, 1)
    assert reply["plain_text"] == NOT_HEARD_REPLY
    assert not stack.prompts_with("Thank you")  # the model never saw it


def test_a_backend_outage_is_told_then_workflows_retry_transcribes_it(stack: Stack) -> None:
    user = 203
    stack.stt.says(CHAINED, "Call mum at six.")
    stack.stt.fail_next(503, times=3, retry_after=0.1)  # every attempt of this turn fails
    update_id = stack.tg.add_voice(user, user, CHAINED, duration=2)
    [apology] = stack.wait_sent(user, 1)
    assert apology["plain_text"].startswith(FAILED_REPLY.split("`")[0].strip())
    instance = f"tg-update-{update_id}"
    stack.daemon.wait_for_instances(1, status="errored")
    saved = [
        m for m in stack.daemon.cli_json("history", "--chat", str(user)) if m["role"] == "user"
    ]
    assert saved[0]["meta"]["file_id"] and "HTTP 503" in saved[0]["meta"]["transcription_error"]

    assert stack.daemon.cli("workflows", "retry", instance).returncode == 0
    echo, _ = stack.wait_sent(user, 3)[1:]
    assert "Call mum at six." in echo["plain_text"]
    assert stack.prompts_with("Call mum at six.")
    users = [
        m for m in stack.daemon.cli_json("history", "--chat", str(user)) if m["role"] == "user"
    ]
    assert len(users) == 1 and "Call mum at six." in users[0]["content"]


def test_a_pdf_is_read_for_the_turn_and_added_only_when_the_button_is_pressed(
    stack: Stack,
) -> None:
    user = 204
    pdf = make_pdf(
        ["Boiler manual", "The boiler code is 4711.\nService every spring."], title="Boiler manual"
    )
    stack.tg.add_document(
        user, user, pdf, "boiler.pdf", "application/pdf", caption="what is the boiler code?"
    )
    answer, offer = stack.wait_sent(user, 2)
    assert answer["plain_text"] == "The boiler code is 4711."
    [prompt] = stack.prompts_with("4711")
    assert "<data>" in prompt and "boiler.pdf" in prompt and "save_chat_document" in prompt
    assert stack.daemon.query("SELECT COUNT(*) FROM doc_documents")[0][0] == 0  # not yet

    button = offer["reply_markup"]["inline_keyboard"][0][0]
    stack.tg.add_callback_query(user, user, offer["message_id"], button["callback_data"])
    done = stack.wait_sent(user, 3)[2]
    assert done["plain_text"].startswith("Added boiler.pdf to your documents")
    sources = [r[0] for r in stack.daemon.query("SELECT source FROM doc_documents")]
    assert sources == [f"chat:{user}/boiler.pdf"]
    # A second press adds nothing and says so.
    stack.tg.add_callback_query(user, user, offer["message_id"], button["callback_data"])
    stack.tg.wait_until(lambda: len(stack.tg.callback_answers) >= 2, 10, "two answers")
    assert "already" in stack.tg.callback_answers[-1]["text"]
    assert len(stack.daemon.query("SELECT source FROM doc_documents")) == 1


def test_asking_to_keep_a_document_saves_it_once_approved_without_offering_a_button(
    stack: Stack,
) -> None:
    user, owner = 207, USERS[0]
    # The card goes to the owner's private chat, which exists once they have written to the
    # bot (Telegram's rule, which the fake keeps), as they did when pairing.
    said = len(stack.sent(owner))
    stack.tg.add_message(owner, owner, "hello from the owner")
    stack.wait_sent(owner, said + 1)
    before = len(stack.sent(owner))
    update_id = stack.tg.add_document(
        user,
        user,
        b"# Wifi\n\nThe guest password is plum-42.\n",
        "wifi.md",
        "text/markdown",
        caption="keep this one",
    )
    # The document is outside content in view: saving it to the library asks the owner
    # (docs/security.md), whose card arrives in their private chat.
    card = stack.tg.wait_until(
        lambda: next((m for m in stack.sent(owner)[before:] if m.get("reply_markup")), None),
        60,
        "the approval card",
    )
    approve = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    stack.tg.add_callback_query(owner, owner, card["message_id"], approve)
    stack.tg.wait_until(
        lambda: any(m["plain_text"] == "Kept." for m in stack.sent(user)), 60, "the answer"
    )
    sources = [r[0] for r in stack.daemon.query("SELECT source FROM doc_documents")]
    assert f"chat:{user}/wifi.md" in sources
    _wait_complete(stack.daemon, f"tg-update-{update_id}")
    # No "Add to my documents" offer: the document was kept as asked.
    assert not any(m.get("reply_markup") for m in stack.sent(user))


def test_the_tools_about_a_sent_file_are_offered_only_in_a_chat_where_one_was_sent(
    stack: Stack,
) -> None:
    about_sent = {"save_chat_document", "save_sent_file"}

    def offered(needle: str) -> set[str]:
        [body] = [r["body"] for r in stack.llm.requests if needle in _last_user_text(r["body"])]
        return {t["name"] for t in body["tools"]}

    user, other = 208, 209
    stack.tg.add_message(user, user, "hello before any file")
    stack.wait_sent(user, 1)
    assert not about_sent & offered("hello before any file")
    assert "send_file" in offered("hello before any file")  # the others are there
    stack.tg.add_document(
        user, user, b"# Plants\n\nWater the fern on Sundays.\n", "plants.md", "text/markdown"
    )
    stack.wait_sent(user, 3)  # the answer and the offer to keep it
    assert about_sent <= offered("Water the fern on Sundays.")
    stack.tg.add_message(user, user, "and after the file")
    stack.wait_sent(user, 4)
    assert about_sent <= offered("and after the file")
    stack.tg.add_message(other, other, "meanwhile in another chat")
    stack.wait_sent(other, 1)
    assert not about_sent & offered("meanwhile in another chat")


def test_an_unsupported_document_gets_a_reply_naming_what_is_read(stack: Stack) -> None:
    user = 205
    stack.tg.add_document(user, user, b"\x00\x01binary", "holiday.heic", "image/heic")
    [reply] = stack.wait_sent(user, 1)
    assert "holiday.heic" in reply["plain_text"] and "PDF" in reply["plain_text"]
    assert not stack.prompts_with("holiday.heic")


def test_a_tool_that_returns_a_file_has_it_sent_as_a_document(stack: Stack) -> None:
    user = 206
    stack.tg.add_message(user, user, "send me the weekly report")
    stack.wait_sent(user, 1)
    [doc] = stack.tg.wait_until(
        lambda: [d for d in stack.tg.documents if d["chat_id"] == user], 20, "a document"
    )
    assert doc["file_name"] == "report-week-3.csv" and doc["caption"] == "Week 3"
    assert doc["data"].startswith(b"day,steps\n1,4000")
    assert stack.sent(user)[0]["plain_text"] == "Here is your report."
    outgoing = stack.daemon.tmp / "outgoing"
    poll(lambda: not list(outgoing.iterdir()), 10, "outgoing/ emptied")  # nothing kept
    journal = stack.daemon.query("SELECT result FROM workflow_steps WHERE name = 'tool:tu_rep'")
    assert "day,steps" not in journal[0][0]  # only the path travels through the journal


def test_without_a_backend_a_voice_note_gets_told_how_to_enable_it(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        with running_daemon(tmp_path, daemon_env(tmp_path, tg.base_url, llm.base_url)):
            tg.add_voice(42, 42, VOICE, duration=4)
            [reply] = tg.wait_for_sent(1, timeout=20)
    assert "[media]" in reply["plain_text"] and "transcription" in reply["plain_text"]
    assert llm.requests == []


def _wait_complete(daemon: Daemon, instance_id: str) -> None:
    query = "SELECT status FROM workflow_instances WHERE id = ?"
    poll(
        lambda: daemon.query(query, (instance_id,))[0][0] == "complete",
        20,
        f"{instance_id} to complete",
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
