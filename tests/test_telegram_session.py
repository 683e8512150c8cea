"""The one retry policy, driven through the real aiogram client, FaultProxy and FakeTelegram."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramNetworkError, TelegramServerError
from aiogram.methods import Response, SendMessage
from aiogram.types import BufferedInputFile, Message
from aiohttp import ConnectionTimeoutError, SocketTimeoutError

from agentd.channels import config_class
from agentd.telegram.bot import make_bot
from agentd.telegram.session import RetryPolicy, classify_fault, lenient_json_loads
from tests.daemon_process import TOKEN
from tests.fakes import FakeTelegram
from tests.fakes.fault_proxy import FaultProxy

CHAT = 7


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[FakeTelegram, FaultProxy]]:
    with FakeTelegram.running() as tg, FaultProxy.running(tg.base_url, "telegram") as proxy:
        tg.add_chat(CHAT)
        yield tg, proxy


@pytest.fixture
async def bot(
    servers: tuple[FakeTelegram, FaultProxy],
) -> AsyncIterator[tuple[Bot, list[tuple[str, Any, str]]]]:
    _, proxy = servers
    proxy.clear()
    config = config_class().model_validate(
        {
            "telegram": {
                "api_base": proxy.base_url,
                "send_retries": 2,
                "retry_base_delay": 0.001,
                "max_backoff": 0.01,
                "max_retry_after": 0.01,
                "request_timeout": 0.5,
            },
            "stored_secrets": {"TELEGRAM_BOT_TOKEN": TOKEN},
        }
    )
    uncertain: list[tuple[str, Any, str]] = []

    async def on_uncertain(method: str, chat_id: Any, reason: str) -> None:
        uncertain.append((method, chat_id, reason))

    instance = make_bot(config, on_uncertain=on_uncertain)
    yield instance, uncertain
    await instance.session.close()


def tries(proxy: FaultProxy, method: str) -> int:
    return len(proxy.seen(method))


async def test_an_nginx_page_is_retried_and_not_counted_as_delivered(
    servers: tuple[FakeTelegram, FaultProxy], bot: tuple[Bot, list[Any]]
) -> None:
    _, proxy = servers
    client, uncertain = bot
    before = tries(proxy, "sendMessage")
    proxy.fail("sendMessage", "status", status=502, body="html", times=2)
    message = await client.send_message(CHAT, "hello")
    assert message.text == "hello" and tries(proxy, "sendMessage") - before == 3
    assert uncertain == []


async def test_a_cut_answer_is_counted_as_a_possible_duplicate(
    servers: tuple[FakeTelegram, FaultProxy], bot: tuple[Bot, list[Any]]
) -> None:
    tg, proxy = servers
    client, uncertain = bot
    proxy.fail("sendMessage", "cut")
    await client.send_message(CHAT, "twice?")
    assert [m["text"] for m in tg.sent].count("twice?") == 2
    assert [(u[0], u[1]) for u in uncertain] == [("sendMessage", CHAT)]


async def test_retries_run_out_and_the_transient_error_surfaces(
    servers: tuple[FakeTelegram, FaultProxy], bot: tuple[Bot, list[Any]]
) -> None:
    _, proxy = servers
    client, _ = bot
    before = tries(proxy, "sendMessage")
    proxy.fail("sendMessage", "status", status=503, times=5)
    with pytest.raises(TelegramServerError):
        await client.send_message(CHAT, "never")
    assert tries(proxy, "sendMessage") - before == 3  # send_retries=2: three attempts


async def test_best_effort_methods_and_permanent_answers_are_tried_once(
    servers: tuple[FakeTelegram, FaultProxy], bot: tuple[Bot, list[Any]]
) -> None:
    _, proxy = servers
    client, _ = bot
    before = tries(proxy, "sendChatAction")
    proxy.fail("sendChatAction", "hang", seconds=1.0)
    with pytest.raises(TelegramNetworkError):
        await client.send_chat_action(CHAT, "typing")
    assert tries(proxy, "sendChatAction") - before == 1
    before = tries(proxy, "sendMessage")
    with pytest.raises(TelegramBadRequest):
        await client.send_message(999_999, "unknown chat")  # 400 chat not found: final
    assert tries(proxy, "sendMessage") - before == 1


async def test_a_fault_s_reason_never_carries_the_token_of_the_address_it_failed_at(
    servers: tuple[FakeTelegram, FaultProxy], bot: tuple[Bot, list[Any]]
) -> None:
    """The Bot API's address holds the token (/bot<token>/method), and the HTTP library's error
    for a redirect loop quotes the address: the reason that reaches the log, systemd's status
    line and the uncertain-send count must not carry it, whole or cut."""
    _, proxy = servers
    client, _ = bot
    proxy.fail("sendChatAction", "redirect", times=20)  # past the client's 10 redirects
    with pytest.raises(TelegramNetworkError) as raised:
        await client.send_chat_action(CHAT, "typing")
    assert TOKEN[:12] in raised.value.message  # what the library said
    reason = classify_fault(raised.value).reason
    assert reason.startswith("network: TooManyRedirects")
    assert not any(TOKEN[i : i + 8] in reason for i in range(len(TOKEN) - 7)), reason
    proxy.clear()


def test_classification_and_backoff() -> None:
    assert classify_fault(ConnectionResetError()).kind == "transient"
    assert classify_fault(ValueError("bug")).kind == "permanent"
    # No connection made: surely not done; no answer to a request made: maybe done.
    method = SendMessage(chat_id=CHAT, text="hi")
    for cause, maybe_done in [
        (ConnectionTimeoutError("connect"), False),
        (SocketTimeoutError("read"), True),
        (TimeoutError(), True),
    ]:
        exc = TelegramNetworkError(method=method, message="Request timeout error")
        exc.__cause__ = cause
        fault = classify_fault(exc)
        assert (fault.kind, fault.maybe_done) == ("transient", maybe_done), cause
    policy = RetryPolicy(base_delay=0.5, max_backoff=5.0, max_retry_after=30.0)
    assert all(policy.wait(n) <= 5.0 for n in [*range(1, 30), 100_000])
    assert policy.wait(1, retry_after=120) == 30.0


def test_lone_surrogates_become_replacement_characters() -> None:
    decoded = lenient_json_loads('{"text": "a\\ud83d b \\ud83d\\ude00"}')
    assert decoded == {"text": "a\ufffd b \U0001f600"}
    # Lowercase or uppercase escapes, inside a list; a literal backslash-u text is left as it is.
    assert lenient_json_loads('[{"t": ["\\uDC00x"]}]') == [{"t": ["\ufffdx"]}]
    assert lenient_json_loads('{"t": "\\\\ud83d \\u00e9"}') == {"t": "\\ud83d \u00e9"}


async def test_an_upload_passes_the_proxy_whole(
    servers: tuple[FakeTelegram, FaultProxy], bot: tuple[Bot, list[Any]]
) -> None:
    # aiogram streams multipart bodies chunked; the proxy (as nginx) forwards them de-chunked.
    tg, _ = servers
    client, _ = bot
    await client.send_document(CHAT, BufferedInputFile(b"%PDF-1.4", "a.pdf"), caption="a file")
    upload = tg.calls("sendDocument")[-1]
    assert upload["content_type"] == "multipart/form-data"
    assert upload["params"]["caption"] == "a file"
    assert tg.documents[-1]["data"] == b"%PDF-1.4"


async def test_answer_models_outlive_a_garbage_collection(
    servers: tuple[FakeTelegram, FaultProxy], bot: tuple[Bot, list[Any]]
) -> None:
    # pydantic caches Response[T] only weakly: rebuilt per call, it costs a third of a turn's CPU.
    client, _ = bot
    await client.send_message(CHAT, "once")
    built = weakref.ref(Response[Message])
    gc.collect()
    assert built() is not None
