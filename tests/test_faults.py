"""The fault suite: `agentd run` behind a fault-injecting proxy on both wires.

One daemon serves every case: the real aiogram and anthropic clients talk to FaultProxy
instances in front of the fakes, and each case switches a fault on for one method, sends a
message and checks what the user saw, what history holds, how often the method was tried,
and that the process lives. The last test greps the whole run's output for tracebacks.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

import pytest
from PIL import Image

from agentd.agent.turn import EMPTY_MESSAGE, LLM_ERROR_REPLY
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.fault_proxy import FaultProxy

GROUP = -1001
CONFIG = """
[tools]
plugins = ["tests.plugins.e2e_tools"]
disabled = ["current_time", "fetch_url", "remember", "search_memory", "search_docs"]
approval_timeout = 60
"""


@dataclass
class Stack:
    tg: FakeTelegram
    llm: FakeAnthropic
    tg_proxy: FaultProxy
    llm_proxy: FaultProxy
    daemon: Daemon


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("faults")
    (tmp / "agentd.toml").write_text(CONFIG)
    with (
        FakeTelegram.running() as tg,
        FakeAnthropic.running() as llm,
        FaultProxy.running(tg.base_url, "telegram") as tg_proxy,
        FaultProxy.running(llm.base_url, "anthropic") as llm_proxy,
    ):
        env = daemon_env(
            tmp,
            tg_proxy.base_url,
            llm_proxy.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_ACCESS__ALLOW_GROUPS="true",
            AGENTD_TELEGRAM__SEND_RETRIES="6",
            AGENTD_TELEGRAM__RETRY_BASE_DELAY="0.02",
            AGENTD_TELEGRAM__MAX_BACKOFF="0.2",
            AGENTD_TELEGRAM__MAX_RETRY_AFTER="0.3",
            AGENTD_TELEGRAM__REQUEST_TIMEOUT="1",
            AGENTD_LLM__TIMEOUT="1.5",
            AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",  # every case is a message from the owner
            AGENTD_MEMORY__SUMMARY_THRESHOLD="10000",  # no background model calls to count
            # The fake answers at once: typing and drafts only go out when they show at once.
            AGENTD_CHAT__PROGRESS_DELAY="0",
        )
        # Start-up while Telegram is unreachable or answers garbage: the daemon waits.
        tg_proxy.fail("getMe", "status", status=502, body="html")
        tg_proxy.fail("getMe", "status", status=404, body="foreign")
        tg_proxy.fail("getMe", "cut")
        daemon = Daemon(tmp, env).start(timeout=120)
        try:
            yield Stack(tg, llm, tg_proxy, llm_proxy, daemon)
        finally:
            daemon.stop()


_texts = count(1)


def _instance(update_id: int) -> str:
    return f"tg-update-{update_id}"


def wait_done(stack: Stack, update_id: int, timeout: float = 30.0) -> str:
    """Wait until the turn started by this update has finished; return its status."""
    deadline = time.monotonic() + timeout
    while True:
        rows = stack.daemon.query(
            "SELECT status FROM workflow_instances WHERE id = ?", (_instance(update_id),)
        )
        if rows and rows[0][0] in ("complete", "errored", "cancelled"):
            return str(rows[0][0])
        assert stack.daemon.proc is not None and stack.daemon.proc.poll() is None, "agentd died"
        assert time.monotonic() < deadline, f"turn {update_id} unfinished: {rows and rows[0][0]}"
        time.sleep(0.05)


def history_of(stack: Stack, update_id: int) -> list[tuple[str, str]]:
    rows = stack.daemon.query(
        "SELECT role, content FROM messages WHERE instance_id = ? ORDER BY id",
        (_instance(update_id),),
    )
    return [(r[0], r[1]) for r in rows]


def sent_texts(stack: Stack, text: str) -> list[str]:
    return [m["plain_text"] for m in stack.tg.sent if m["plain_text"] == text]


def uncertain_rows(stack: Stack) -> int:
    return stack.daemon.query("SELECT COUNT(*) FROM audit WHERE kind = 'send_uncertain'")[0][0]


@dataclass
class Turn:
    update_id: int
    text: str
    status: str
    tries: int  # how often the faulty method reached the proxy during the turn
    uncertain: int  # send_uncertain rows written during the turn


def run_turn(
    stack: Stack,
    proxy: FaultProxy,
    method: str,
    mode: str,
    *,
    armed: bool = False,
    **options: Any,
) -> Turn:
    """Switch one fault on, send one message, wait for its turn; the fault is off after.

    armed: send the message only once the faulty call is under way (a long poll in flight
    carries the update, so a lost answer loses the update with it).
    """
    text = f"case {next(_texts)} {method} {mode}"
    seen_before = len(proxy.seen(method))
    uncertain_before = uncertain_rows(stack)
    proxy.fail(method, mode, **options)
    try:
        if armed:
            proxy.wait_until(lambda: not proxy.pending_faults(), 10, "the faulty call")
        update_id = stack.tg.add_message(OWNER, OWNER, text)
        status = wait_done(stack, update_id)
        missed = [f for f in proxy.pending_faults() if f.method == method]
        assert not missed, f"fault never hit: {proxy.seen()[-8:]}\n{stack.daemon.log()[-3000:]}"
    finally:
        proxy.clear()
    tries = len(proxy.seen(method)) - seen_before
    return Turn(update_id, text, status, tries, uncertain_rows(stack) - uncertain_before)


def assert_answered(stack: Stack, turn: Turn, copies: int = 1) -> None:
    """The turn completed, the user saw its answer `copies` times, history holds both once."""
    answer = f"echo: {turn.text}"
    assert turn.status == "complete"
    assert len(sent_texts(stack, answer)) == copies
    assert history_of(stack, turn.update_id) == [("user", turn.text), ("assistant", answer)]


TELEGRAM_FAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "dropped": ("drop", {}),
    "timeout": ("hang", {"seconds": 1.5}),
    "429": ("status", {"status": 429, "retry_after": 1}),
    "500-json": ("status", {"status": 500}),
    "502-json": ("status", {"status": 502}),
    "503-json": ("status", {"status": 503}),
    "502-html": ("status", {"status": 502, "body": "html"}),
    "200-cut": ("cut", {}),
    "404-foreign": ("status", {"status": 404, "body": "foreign"}),
}
# Where Telegram did the work but the answer was lost, a retried send shows the message twice:
# the documented duplicate window, which is counted (send_uncertain) rather than hidden.
DELIVERED_THEN_LOST = {"dropped", "200-cut"}


def test_start_up_waits_for_telegram(stack: Stack) -> None:
    getme = stack.tg_proxy.seen("getMe")
    assert [s.fault for s in getme] == ["status", "status", "cut", None]
    log = stack.daemon.log()
    assert log.count("waiting for Telegram") == 3
    assert "HTTP 502 answer is not Bot API JSON" in log


@pytest.mark.parametrize("fault", list(TELEGRAM_FAULTS))
def test_send_message_faults(stack: Stack, fault: str) -> None:
    mode, options = TELEGRAM_FAULTS[fault]
    turn = run_turn(stack, stack.tg_proxy, "sendMessage", mode, **options)
    assert_answered(stack, turn, copies=2 if fault in DELIVERED_THEN_LOST else 1)
    assert turn.tries == 2  # the faulty attempt and one retry
    assert (turn.uncertain >= 1) == (fault in DELIVERED_THEN_LOST | {"timeout"})


@pytest.mark.parametrize("method", ["sendChatAction", "sendMessageDraft"])
@pytest.mark.parametrize("fault", list(TELEGRAM_FAULTS))
def test_best_effort_faults_never_fail_a_turn(stack: Stack, method: str, fault: str) -> None:
    mode, options = TELEGRAM_FAULTS[fault]
    turn = run_turn(stack, stack.tg_proxy, method, mode, **options)
    assert_answered(stack, turn)
    assert turn.tries == 1  # best effort: never retried (a late draft is worse than none)
    assert turn.uncertain == 0


@pytest.mark.parametrize("fault", list(TELEGRAM_FAULTS))
def test_get_updates_faults(stack: Stack, fault: str) -> None:
    mode, options = TELEGRAM_FAULTS[fault]
    turn = run_turn(stack, stack.tg_proxy, "getUpdates", mode, armed=True, **options)
    # A batch whose answer was lost is fetched again; its update starts one turn only.
    assert_answered(stack, turn)
    assert turn.tries >= 2


def test_connection_refused(stack: Stack) -> None:
    turn = run_turn(stack, stack.tg_proxy, "*", "refuse", seconds=0.4)
    assert_answered(stack, turn)
    assert turn.uncertain == 0  # a refused connection never delivered anything


MODEL_FAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "429": ("status", {"status": 429, "retry_after": 0.1}),
    "500": ("status", {"status": 500}),
    "502": ("status", {"status": 502}),
    "503": ("status", {"status": 503}),
    "529": ("status", {"status": 529}),
    "502-html": ("status", {"status": 502, "body": "html"}),
    "timeout": ("hang", {"seconds": 3}),
    "dropped-stream": ("sse_drop", {}),
    "malformed-event": ("sse_garble", {}),
    "no-message-stop": ("sse_no_stop", {}),
}
BROKEN_STREAMS = {"dropped-stream", "malformed-event", "no-message-stop"}


@pytest.mark.parametrize("fault", list(MODEL_FAULTS))
def test_model_faults_are_retried(stack: Stack, fault: str) -> None:
    mode, options = MODEL_FAULTS[fault]
    turn = run_turn(stack, stack.llm_proxy, "messages", mode, **options)
    assert_answered(stack, turn)
    assert turn.tries == 2
    attempts = stack.daemon.query(
        "SELECT attempt FROM llm_usage WHERE instance_id = ? ORDER BY attempt",
        (_instance(turn.update_id),),
    )
    # One answer, from the second attempt; a stream that broke after it began was billed for
    # what it had generated, and a request sent whole whose answer timed out was taken (as
    # far as agentd can tell), so that attempt has its row too.
    billed = [1, 2] if fault in BROKEN_STREAMS | {"timeout"} else [2]
    assert [r[0] for r in attempts] == billed


@pytest.mark.parametrize("status", [400, 401])
def test_model_refusals_are_not_retried(stack: Stack, status: int) -> None:
    turn = run_turn(stack, stack.llm_proxy, "messages", "status", status=status)
    assert turn.status == "errored"
    assert turn.tries == 1
    assert sent_texts(stack, LLM_ERROR_REPLY.replace("`", ""))  # the user is told, once per turn
    assert history_of(stack, turn.update_id) == [
        ("user", turn.text),
        ("assistant", LLM_ERROR_REPLY),
    ]


def test_lone_surrogates_are_replaced_and_answered(stack: Stack) -> None:
    text = f"broken emoji \ud83d here {next(_texts)}"
    update_id = stack.tg.add_message(OWNER, OWNER, text)
    assert wait_done(stack, update_id) == "complete"
    cleaned = text.replace("\ud83d", "\ufffd")
    assert history_of(stack, update_id) == [("user", cleaned), ("assistant", f"echo: {cleaned}")]


def test_an_unreadable_update_is_audited_and_answered(stack: Stack) -> None:
    update_id = stack.tg.add_update(
        {
            "message": {
                "message_id": 9001,
                "date": int(time.time()),
                "text": 12345,
                "from": {"id": OWNER, "is_bot": False, "first_name": "O"},
                "chat": {"id": OWNER, "type": "private"},
            }
        }
    )
    assert wait_done(stack, update_id) == "complete"
    row = stack.daemon.query(
        "SELECT detail FROM audit WHERE kind = 'update_unreadable' AND chat_id = ?", (OWNER,)
    )
    assert json.loads(row[-1][0])["update_id"] == update_id
    assert "couldn't read that message" in stack.tg.sent[-1]["plain_text"]


def test_a_message_with_link_preview_options_does_not_block_the_poll(stack: Stack) -> None:
    # aiogram fills the options' missing fields with Default placeholders that pydantic could
    # not write out: the batch failed before its offset was acknowledged, for ever.
    text = f"see https://example.org {next(_texts)}"
    update_id = stack.tg.add_update(
        {
            "message": {
                "message_id": 9002,
                "date": int(time.time()),
                "text": text,
                "link_preview_options": {"url": "https://example.org"},
                "from": {"id": OWNER, "is_bot": False, "first_name": "O"},
                "chat": {"id": OWNER, "type": "private"},
            }
        }
    )
    assert wait_done(stack, update_id) == "complete"
    assert history_of(stack, update_id) == [("user", text), ("assistant", f"echo: {text}")]
    after = stack.tg.add_message(OWNER, OWNER, f"and after {next(_texts)}")
    assert wait_done(stack, after) == "complete"


def test_a_bare_mention_still_ends_the_request_with_the_user(stack: Stack) -> None:
    stack.tg.add_chat(GROUP, "group", OWNER)
    before = len(stack.llm.requests)
    update_id = stack.tg.add_message(GROUP, OWNER, "@fake_bot", chat_type="group")
    assert wait_done(stack, update_id) == "complete"
    messages = stack.llm.requests[before]["body"]["messages"]
    assert messages[-1]["role"] == "user"
    # The newest message carries the per-call <context> block last (the prompt-cache layout).
    assert any(b.get("text", "").endswith(EMPTY_MESSAGE) for b in messages[-1]["content"])


def test_medium_risk_note_renders_as_italics(stack: Stack) -> None:
    stack.llm.enqueue_tool_use("add_note", {"text": "milk"}, "toolu_note1")
    stack.llm.enqueue_text("Noted.")
    update_id = stack.tg.add_message(OWNER, OWNER, f"note milk {next(_texts)}")
    assert wait_done(stack, update_id) == "complete"
    sent = stack.tg.sent[-1]
    assert "<i>Done on your behalf: add_note (text: milk).</i>" in sent["text"]


def test_an_invalid_structured_answer_is_asked_for_again(stack: Stack) -> None:
    """R-LLM-5: the vision summary fails validation once, then comes right."""
    image = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 120, 200)).save(image, format="PNG")
    stack.llm.enqueue_tool_use("record_image_summary", {"entities": "not a list"})
    stack.llm.enqueue_tool_use("record_image_summary", {"summary": "A blue square."})
    before = len(stack.llm.requests)
    update_id = stack.tg.add_photo(OWNER, OWNER, image.getvalue(), caption="what is it?")
    assert wait_done(stack, update_id) == "complete"
    forced = [r for r in stack.llm.requests[before:] if r["body"].get("tool_choice")]
    assert len(forced) == 2
    assert "A blue square." in history_of(stack, update_id)[0][1]


def test_a_cancelled_approval_takes_its_buttons_down(stack: Stack) -> None:
    stack.llm.enqueue_tool_use("delete_file", {"path": "/tmp/x"}, "toolu_cancel1")
    update_id = stack.tg.add_message(OWNER, OWNER, f"delete it {next(_texts)}")
    card = stack.tg.wait_until(
        lambda: next((m for m in stack.tg.sent if m["reply_markup"]), None), 20, "approval card"
    )
    result = stack.daemon.cli("workflows", "cancel", _instance(update_id))
    assert result.returncode == 0, result.stderr
    assert wait_done(stack, update_id) == "cancelled"
    edit = stack.tg.wait_until(
        lambda: next((e for e in stack.tg.edits if e["message_id"] == card["message_id"]), None),
        20,
        "the card's edit",
    )
    assert "cancelled" in edit["text"] and not edit.get("reply_markup")


@pytest.mark.parametrize("fault", ["502-html", "timeout", "dropped"])
def test_approval_card_edits_and_button_answers_survive_faults(stack: Stack, fault: str) -> None:
    mode, options = TELEGRAM_FAULTS[fault]
    stack.llm.enqueue_tool_use("delete_file", {"path": f"/tmp/{fault}"}, f"toolu_{fault}")
    stack.llm.enqueue_text("Deleted.")
    before = len(stack.tg.sent)
    update_id = stack.tg.add_message(OWNER, OWNER, f"delete {fault} {next(_texts)}")
    card = stack.tg.wait_until(
        lambda: next((m for m in stack.tg.sent[before:] if m["reply_markup"]), None), 20, "card"
    )
    stack.tg_proxy.fail("answerCallbackQuery", mode, **options)
    stack.tg_proxy.fail("editMessageText", mode, **options)
    data = card["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    stack.tg.add_callback_query(OWNER, OWNER, card["message_id"], data)
    try:
        assert wait_done(stack, update_id) == "complete"
    finally:
        stack.tg_proxy.clear()
    assert stack.tg.sent[-1]["plain_text"].startswith("Deleted.")
    assert f"delete_file /tmp/{fault}" in stack.daemon.effects()


def test_a_send_cut_short_by_a_crash_is_counted_when_repeated(stack: Stack) -> None:
    """R-DUR-7's window: killed while sendMessage is in flight; the restart sends it again."""
    before = len(stack.tg_proxy.seen("sendMessage"))
    stack.tg_proxy.fail("sendMessage", "hang", seconds=3, times=20)
    text = f"crash during send {next(_texts)}"
    update_id = stack.tg.add_message(OWNER, OWNER, text)
    stack.tg_proxy.wait_until(
        lambda: len(stack.tg_proxy.seen("sendMessage")) > before, 20, "the send"
    )
    stack.daemon.kill9()
    stack.tg_proxy.clear()
    stack.daemon.start(timeout=90)
    assert wait_done(stack, update_id) == "complete"
    assert sent_texts(stack, f"echo: {text}") == [f"echo: {text}"]
    rows = stack.daemon.query(
        "SELECT detail FROM audit WHERE kind = 'send_uncertain' AND instance_id = ?",
        (_instance(update_id),),
    )
    assert [json.loads(r[0])["step"] for r in rows] == ["send#1"]


def test_no_traceback_in_any_fault_case(stack: Stack) -> None:
    assert stack.daemon.proc is not None and stack.daemon.proc.poll() is None
    log = stack.daemon.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
