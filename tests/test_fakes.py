"""The fakes speak the real wire formats: the real aiogram and anthropic clients work with them."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterator

import aiohttp
import anthropic
import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramBadRequest,
    TelegramConflictError,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

from agentd.llm import anthropic_errors
from tests.fakes import FakeAnthropic, FakeProcess, FakeTelegram

TOKEN = "123456:TEST-token"
MODEL = "claude-haiku-4-5"


def png_bytes(width: int = 3, height: int = 2) -> bytes:
    """A tiny valid PNG (grey pixels)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


# ================================================================================ Telegram


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram.running(token=TOKEN) as fake:
        yield fake


def make_bot(base_url: str, token: str = TOKEN) -> Bot:
    return Bot(token, session=AiohttpSession(api=TelegramAPIServer.from_base(base_url)))


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    b = make_bot(tg.base_url)
    yield b
    await b.session.close()


async def test_get_me_and_token_checks(tg: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert (me.id, me.is_bot, me.username) == (123456, True, "fake_bot")

    other = make_bot(tg.base_url, "999:wrong")
    with pytest.raises(TelegramUnauthorizedError):
        await other.get_me()
    await other.session.close()

    async with aiohttp.ClientSession() as http:
        async with http.post(f"{tg.base_url}/botnot-a-token/getMe") as resp:
            assert resp.status == 404
            assert await resp.json() == {"ok": False, "error_code": 404, "description": "Not Found"}
        # JSON bodies and GET query strings work too, like on Telegram.
        async with http.get(f"{tg.base_url}/bot{TOKEN}/getMe") as resp:
            assert (await resp.json())["result"]["id"] == 123456
        async with http.post(f"{tg.base_url}/bot{TOKEN}/noSuchMethod", json={}) as resp:
            assert resp.status == 404
            assert (await resp.json())["description"] == "Not Found: method not found"


async def test_get_updates_offset_confirms_forever(tg: FakeTelegram, bot: Bot) -> None:
    first = tg.add_message(42, 42, "one")
    second = tg.add_message(42, 42, "two", reply_to=1)

    updates = await bot.get_updates()
    assert [u.update_id for u in updates] == [first, second]
    assert updates[1].message is not None and updates[1].message.reply_to_message is not None
    assert updates[1].message.reply_to_message.text == "one"
    # Without an offset nothing is confirmed: the same updates come again.
    assert len(await bot.get_updates(limit=1)) == 1

    assert [u.update_id for u in await bot.get_updates(offset=second)] == [second]
    assert tg.confirmed_offset == second
    assert await bot.get_updates(offset=second + 1) == []
    assert tg.pending_updates == []
    # Confirmed updates are gone even for a client that asks from an old offset.
    assert await bot.get_updates(offset=first) == []


async def test_get_updates_long_poll(tg: FakeTelegram, bot: Bot) -> None:
    started = time.monotonic()
    assert await bot.get_updates(timeout=1) == []
    # Held for its timeout, then answered (the upper bound only tells a hang from an answer).
    assert 0.9 < time.monotonic() - started < 30

    poll = asyncio.create_task(bot.get_updates(timeout=10))
    await asyncio.to_thread(tg.wait_for_requests, "getUpdates", 2)  # the fake holds it now
    assert not poll.done()  # and it returns "wake up" below, so it was held until then
    # Scripting is thread-safe: add the message from another thread.
    threading.Thread(target=tg.add_message, args=(42, 42, "wake up")).start()
    started = time.monotonic()
    updates = await asyncio.wait_for(poll, 5)
    assert time.monotonic() - started < 8  # woken by the message, not by its 10 s timeout
    assert updates[0].message is not None and updates[0].message.text == "wake up"


async def test_second_poller_ends_the_first_with_conflict(tg: FakeTelegram, bot: Bot) -> None:
    first = asyncio.create_task(bot.get_updates(timeout=10))
    await asyncio.to_thread(tg.wait_for_requests, "getUpdates", 1)  # the first is at the fake
    second = asyncio.create_task(bot.get_updates(timeout=0))
    with pytest.raises(TelegramConflictError):
        await asyncio.wait_for(first, 5)
    assert await second == []


async def test_allowed_updates_filters_kinds(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_message(42, 42, "hi")
    tg.add_callback_query(42, 42, 1, "approve:1")
    tg.add_message(42, 42, "again")
    updates = await bot.get_updates(allowed_updates=["message"])
    assert [u.message.text for u in updates if u.message] == ["hi", "again"]
    assert all(u.callback_query is None for u in updates)
    assert tg.calls("getUpdates")[-1]["params"]["allowed_updates"] == ["message"]


async def test_send_message_html_and_limits(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_message(42, 42, "hi")
    msg = await bot.send_message(42, "<b>bold</b> &lt;tag&gt; <i>it</i>", parse_mode="HTML")
    assert msg.text == "bold <tag> it"
    assert [(e.type, e.offset, e.length) for e in msg.entities or []] == [
        ("bold", 0, 4),
        ("italic", 11, 2),
    ]
    assert msg.chat.id == 42 and msg.message_id == 2  # ids are per chat, after the user's 1

    with pytest.raises(TelegramBadRequest, match="can't parse entities: Unsupported start tag"):
        await bot.send_message(42, "a <tag> b", parse_mode="HTML")
    with pytest.raises(TelegramBadRequest, match="Can't find end tag corresponding"):
        await bot.send_message(42, "<b>open", parse_mode="HTML")
    with pytest.raises(TelegramBadRequest, match="Unmatched end tag"):
        await bot.send_message(42, "<b><i>x</b></i>", parse_mode="HTML")
    with pytest.raises(TelegramBadRequest, match="message is too long"):
        await bot.send_message(42, "x" * 4097)
    # The limit counts characters after entity parsing.
    await bot.send_message(42, "<b>" + "x" * 4096 + "</b>", parse_mode="HTML")
    with pytest.raises(TelegramBadRequest, match="chat not found"):
        await bot.send_message(777, "who?")
    tg.block(42)
    with pytest.raises(TelegramForbiddenError):
        await bot.send_message(42, "blocked")

    sent = tg.sent
    assert [s["plain_text"][:4] for s in sent] == ["bold", "xxxx"]
    assert sent[0]["text"].startswith("<b>bold</b>") and sent[0]["parse_mode"] == "HTML"


async def test_flood_control_and_faults(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(42)
    tg.fail_next("sendMessage", 429, retry_after=7)
    with pytest.raises(TelegramRetryAfter) as info:
        await bot.send_message(42, "hello")
    assert info.value.retry_after == 7
    assert "Too Many Requests: retry after 7" in info.value.message

    tg.drop_next("sendMessage")
    with pytest.raises(TelegramNetworkError):
        await bot.send_message(42, "hello")
    tg.fail_next("*", mode="malformed")
    with pytest.raises(ClientDecodeError):
        await bot.send_chat_action(42, "typing")
    tg.fail_next("sendMessage", 502)
    with pytest.raises(Exception, match="Bad Gateway"):
        await bot.send_message(42, "hello")

    await bot.send_message(42, "hello")
    assert [s["text"] for s in tg.sent] == ["hello"]
    statuses = [r["status"] for r in tg.calls("sendMessage")]
    assert statuses == [429, "drop", 502, 200]


async def test_actions_keyboards_callbacks_edits(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_message(42, 42, "do it")
    await bot.send_chat_action(42, "typing")
    assert [a["action"] for a in tg.actions] == ["typing"]

    keyboard = InlineKeyboardMarkup(
        inline_keyboard=[[InlineKeyboardButton(text="Approve", callback_data="approve:7")]]
    )
    msg = await bot.send_message(42, "Run it?", reply_markup=keyboard)
    assert tg.sent[0]["reply_markup"]["inline_keyboard"][0][0]["callback_data"] == "approve:7"

    update_id = tg.add_callback_query(42, 42, msg.message_id, "approve:7")
    (update,) = await bot.get_updates(offset=0, allowed_updates=["callback_query"])
    query = update.callback_query
    assert query is not None and query.data == "approve:7" and query.from_user.id == 42
    assert query.id == FakeTelegram.callback_query_id(update_id)
    assert await bot.answer_callback_query(query.id, text="Approved")
    with pytest.raises(TelegramBadRequest, match="query ID is invalid"):
        await bot.answer_callback_query("forged")
    assert tg.callback_answers[0]["text"] == "Approved"

    edited = await bot.edit_message_text("Approved ✅", chat_id=42, message_id=msg.message_id)
    assert not isinstance(edited, bool) and edited.reply_markup is None  # keyboard removed
    with pytest.raises(TelegramBadRequest, match="message is not modified"):
        await bot.edit_message_text("Approved ✅", chat_id=42, message_id=msg.message_id)
    with pytest.raises(TelegramBadRequest, match="message to edit not found"):
        await bot.edit_message_text("x", chat_id=42, message_id=999)
    assert [e["text"] for e in tg.edits] == ["Approved ✅"]
    assert await bot.delete_message(42, msg.message_id)
    assert [m["text"] for m in tg.chat_history(42)] == ["do it"]


async def test_photo_get_file_and_download(tg: FakeTelegram, bot: Bot) -> None:
    image = png_bytes(300, 200)
    tg.add_photo(42, 42, image, caption="what is this?")
    (update,) = await bot.get_updates()
    assert update.message is not None and update.message.photo is not None
    largest = update.message.photo[-1]
    assert (largest.width, largest.height) == (300, 200)
    assert update.message.caption == "what is this?"

    file = await bot.get_file(largest.file_id)
    assert file.file_path and file.file_size == len(image)
    data = await bot.download_file(file.file_path, destination=io.BytesIO())
    assert data is not None and data.getvalue() == image
    with pytest.raises(TelegramBadRequest, match="invalid file_id"):
        await bot.get_file("nope")


async def test_unsupported_kinds_and_edited_messages(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_sticker(42, 42)
    tg.add_voice(42, 42)
    tg.add_message(42, 42, "/start")
    tg.add_edited_message(42, 42, 3, "/start now")
    updates = await bot.get_updates()
    assert updates[0].message is not None and updates[0].message.sticker is not None
    assert updates[1].message is not None and updates[1].message.voice is not None
    assert updates[2].message is not None and updates[2].message.entities is not None
    assert updates[2].message.entities[0].type == "bot_command"
    assert updates[3].edited_message is not None
    assert updates[3].edited_message.text == "/start now"


async def test_drafts_commands_and_disabled_methods(tg: FakeTelegram, bot: Bot) -> None:
    tg.add_chat(42)
    assert await bot.send_message_draft(chat_id=42, draft_id=1, text="Thinking")
    assert await bot.send_message_draft(chat_id=42, draft_id=1, text="Thinking harder")
    assert [d["text"] for d in tg.drafts] == ["Thinking", "Thinking harder"]

    tg.disable_method("sendMessageDraft")
    with pytest.raises(TelegramNotFound):
        await bot.send_message_draft(chat_id=42, draft_id=1, text="x")

    from aiogram.types import BotCommand

    assert await bot.set_my_commands([BotCommand(command="start", description="Start")])
    assert tg.commands == [{"command": "start", "description": "Start"}]
    assert await bot.delete_webhook(drop_pending_updates=True)


def test_telegram_as_a_process() -> None:
    with FakeProcess("telegram", "--token", TOKEN) as proc:
        update = proc.post("message", {"chat_id": 5, "user_id": 5, "text": "hello"})
        assert update["result"]["update_id"] > 0

        async def client() -> None:
            b = make_bot(proc.base_url)
            (u,) = await b.get_updates(timeout=1)
            assert u.message is not None and u.message.text == "hello"
            await b.send_message(5, "hi back")
            await b.session.close()

        asyncio.run(client())
        assert [s["text"] for s in proc.get("wait_sent", count=1)] == ["hi back"]
        assert proc.get("state")["confirmed_offset"] == 0


# =============================================================================== Anthropic


@pytest.fixture
def llm() -> Iterator[FakeAnthropic]:
    with FakeAnthropic.running() as fake:
        yield fake


@pytest.fixture
async def client(llm: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    c = anthropic.AsyncAnthropic(api_key="sk-test-secret", base_url=llm.base_url, max_retries=0)
    yield c
    await c.close()


def user(text: str) -> list[dict[str, object]]:
    return [{"role": "user", "content": text}]


async def test_text_message_and_recorded_request(
    llm: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    llm.enqueue_text("Hello there")
    msg = await client.messages.create(model=MODEL, max_tokens=100, messages=user("hi"))
    assert msg.content[0].type == "text" and msg.content[0].text == "Hello there"
    assert msg.stop_reason == "end_turn" and msg.model == MODEL and msg.id.startswith("msg_")
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0

    # The queue is empty: the default responder echoes.
    echo = await client.messages.create(model=MODEL, max_tokens=100, messages=user("ping"))
    assert echo.content[0].type == "text" and echo.content[0].text == "echo: ping"

    (first, _) = llm.requests
    assert first["body"]["messages"] == user("hi") and first["api_key_present"]
    assert "sk-test-secret" not in json.dumps(llm.requests)
    assert first["headers"]["anthropic-version"]


async def test_tool_use_round_trip_and_validation(
    llm: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    tools = [
        {
            "name": "current_time",
            "description": "Current time",
            "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}},
        }
    ]
    tool_id = llm.enqueue_tool_use("current_time", {"tz": "UTC"}, text_before="Checking.")
    msg = await client.messages.create(
        model=MODEL, max_tokens=100, tools=tools, messages=user("time?")
    )
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    call = msg.content[1]
    assert call.type == "tool_use" and (call.id, call.name, call.input) == (
        tool_id,
        "current_time",
        {"tz": "UTC"},
    )

    history = [
        *user("time?"),
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "12:00"}],
        },
    ]
    final = await client.messages.create(model=MODEL, max_tokens=100, tools=tools, messages=history)
    assert final.content[0].type == "text" and final.content[0].text == "echo: tool_result: 12:00"

    # The fake rejects broken histories the way the API does.
    with pytest.raises(anthropic.BadRequestError, match="without `tool_result` blocks"):
        await client.messages.create(
            model=MODEL, max_tokens=100, tools=tools, messages=history[:2] + user("x")
        )
    with pytest.raises(anthropic.BadRequestError, match="unexpected `tool_use_id`"):
        await client.messages.create(model=MODEL, max_tokens=100, messages=[history[0], history[2]])


async def test_streaming_text_and_tools(
    llm: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    text = "Streaming works, chunk by chunk."
    llm.enqueue_text(text)
    async with client.messages.stream(model=MODEL, max_tokens=100, messages=user("go")) as stream:
        pieces = [piece async for piece in stream.text_stream]
        final = await stream.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == text
    assert final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0

    ids = llm.enqueue_tool_uses(
        [("search", {"q": "weather", "filters": {"days": [1, 2]}}), ("current_time", {})],
        text_before="Two tools.",
    )
    async with client.messages.stream(model=MODEL, max_tokens=100, messages=user("go")) as stream:
        events = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "input_json" in events
    calls = [b for b in final.content if b.type == "tool_use"]
    assert [(c.id, c.name, c.input) for c in calls] == [
        (ids[0], "search", {"q": "weather", "filters": {"days": [1, 2]}}),
        (ids[1], "current_time", {}),
    ]
    assert final.stop_reason == "tool_use"


async def test_errors_surface_as_sdk_exceptions(
    llm: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    llm.enqueue_error(529, "overloaded_error", "Overloaded")
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        await client.messages.create(model=MODEL, max_tokens=10, messages=user("x"))
    assert overloaded.value.status_code == 529
    assert overloaded.value.request_id and overloaded.value.request_id.startswith("req_")

    llm.enqueue_error(429, "rate_limit_error", "Slow down", retry_after=3)
    with pytest.raises(anthropic.RateLimitError) as limited:
        await client.messages.create(model=MODEL, max_tokens=10, messages=user("x"))
    assert limited.value.response.headers["retry-after"] == "3"
    assert limited.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Slow down"},
        "request_id": limited.value.request_id,
    }

    llm.enqueue_error(500)
    with pytest.raises(anthropic.InternalServerError):
        await client.messages.create(model=MODEL, max_tokens=10, messages=user("x"))
    llm.enqueue_drop()
    with pytest.raises(anthropic.APIConnectionError):
        await client.messages.create(model=MODEL, max_tokens=10, messages=user("x"))

    bad_key = anthropic.AsyncAnthropic(api_key="wrong", base_url=llm.base_url, max_retries=0)
    llm.api_key = "right"
    with pytest.raises(anthropic.AuthenticationError):
        await bad_key.messages.create(model=MODEL, max_tokens=10, messages=user("x"))
    await bad_key.close()


async def test_mid_stream_error_and_drop(
    llm: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    llm.enqueue_stream_error("overloaded_error", "Overloaded")
    seen: list[str] = []
    # The SDK raises a plain APIStatusError (the HTTP status was 200) carrying the error body.
    with pytest.raises(anthropic.APIStatusError, match="overloaded_error"):
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=user("x")) as stream:
            async for piece in stream.text_stream:
                seen.append(piece)
    assert seen == ["Partial "]

    llm.enqueue_stream_error(drop=True)
    # Which class a cut connection surfaces as is the SDK's choice (the transport's own error in
    # some releases, APIConnectionError in others); what agentd promises is that it reads it
    # as the model being unreachable, which it retries and falls back on.
    try:
        async with client.messages.stream(model=MODEL, max_tokens=10, messages=user("x")) as stream:
            async for _ in stream:
                pass
    except Exception as exc:
        dropped: BaseException = exc
    else:
        pytest.fail("a dropped stream ended without an error")
    assert anthropic_errors.reason(dropped) == "unreachable"
    assert anthropic_errors.is_retryable(dropped)


async def test_sdk_retries_honour_retry_after(llm: FakeAnthropic) -> None:
    retrying = anthropic.AsyncAnthropic(api_key="k", base_url=llm.base_url, max_retries=2)
    llm.enqueue_error(529, retry_after_ms=50)
    llm.enqueue_error(429, retry_after=0.1)
    msg = await retrying.messages.create(model=MODEL, max_tokens=10, messages=user("again"))
    assert msg.content[0].type == "text" and msg.content[0].text == "echo: again"
    assert [r["headers"]["x-stainless-retry-count"] for r in llm.requests] == ["0", "1", "2"]
    await retrying.close()


async def test_hold_and_release(llm: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    llm.hold()
    llm.enqueue_text("after the pause")
    call = asyncio.create_task(
        client.messages.create(model=MODEL, max_tokens=10, messages=user("x"))
    )
    await asyncio.to_thread(llm.wait_for_held, 1)
    # Held at the fake, nothing answered: the call cannot be done (it gets the text below).
    assert not call.done() and len(llm.requests) == 1 and llm.responses == []
    llm.release()
    msg = await asyncio.wait_for(call, 5)
    assert msg.content[0].type == "text" and msg.content[0].text == "after the pause"


async def test_prompt_cache_usage(llm: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    system = [
        # Over Haiku 4.5's 4,096-token minimum: a shorter prefix is not cached at all.
        {"type": "text", "text": "You are agentd. " * 1100, "cache_control": {"type": "ephemeral"}}
    ]
    first = await client.messages.create(
        model=MODEL, max_tokens=10, system=system, messages=user("a")
    )
    second = await client.messages.create(
        model=MODEL, max_tokens=10, system=system, messages=user("b")
    )
    assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    plain = await client.messages.create(
        model=MODEL, max_tokens=10, system="short", messages=user("c")
    )
    assert plain.usage.cache_creation_input_tokens == 0 == plain.usage.cache_read_input_tokens


async def test_custom_responder(llm: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    llm.set_responder(
        lambda body: f"{len(body['messages'])} messages" if body.get("tools") is None else None
    )
    msg = await client.messages.create(model=MODEL, max_tokens=10, messages=user("x"))
    assert msg.content[0].type == "text" and msg.content[0].text == "1 messages"


def test_anthropic_as_a_process() -> None:
    with FakeProcess("anthropic") as proc:
        proc.post("enqueue", {"kind": "text", "text": "from another process"})
        proc.post("enqueue", {"kind": "error", "status": 529})
        sync = anthropic.Anthropic(api_key="k", base_url=proc.base_url, max_retries=0)
        msg = sync.messages.create(model=MODEL, max_tokens=10, messages=user("x"))
        assert msg.content[0].type == "text" and msg.content[0].text == "from another process"
        with pytest.raises(anthropic.OverloadedError):
            sync.messages.create(model=MODEL, max_tokens=10, messages=user("x"))
        sync.close()
        assert len(proc.get("requests")) == 2


async def test_client_gone_while_held_consumes_nothing(llm: FakeAnthropic) -> None:
    llm.hold()
    llm.enqueue_text("for the next process")
    body = {"model": MODEL, "max_tokens": 10, "messages": user("x")}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    async with aiohttp.ClientSession() as http:
        post = asyncio.create_task(
            http.post(f"{llm.base_url}/v1/messages", json=body, headers=headers)
        )
        await asyncio.to_thread(llm.wait_for_held, 1)
        post.cancel()  # like kill -9 of the client while the model "thinks"
        with pytest.raises(asyncio.CancelledError):
            await post
        # The fake notices the client is gone and stops holding it, before any release.
        await asyncio.to_thread(llm.wait_until, lambda: llm.held == 0)
        llm.release()
        # The marker: the next client gets the queued answer, so the gone one consumed nothing.
        after = await http.post(f"{llm.base_url}/v1/messages", json=body, headers=headers)
        assert (await after.json())["content"][0]["text"] == "for the next process"
    assert llm.queued == 0 and [r["body"]["content"][0]["text"] for r in llm.responses] == [
        "for the next process"
    ]


async def test_in_loop_mode() -> None:
    async with FakeTelegram.serving() as fake:
        fake.add_message(7, 7, "hi")
        b = make_bot(fake.base_url)
        (update,) = await b.get_updates()
        assert update.message is not None
        await b.send_message(7, "hello")
        sent = await fake.wait_for_sent_async(1)
        assert sent[0]["text"] == "hello"
        await b.session.close()


async def test_dispatcher_polling_end_to_end(tg: FakeTelegram, bot: Bot) -> None:
    from aiogram import Dispatcher
    from aiogram.types import Message

    dp = Dispatcher()

    @dp.message()
    async def echo(message: Message) -> None:
        await message.answer(f"you said: {message.text}")

    tg.add_message(42, 42, "hello")
    polling = asyncio.create_task(dp.start_polling(bot, polling_timeout=1, handle_signals=False))
    sent = await asyncio.to_thread(tg.wait_for_sent, 1)
    assert sent[0]["text"] == "you said: hello"
    await dp.stop_polling()
    await asyncio.wait_for(polling, 5)


@pytest.mark.parametrize(
    ("html", "plain", "entities"),
    [
        ("a &amp; b &lt;c&gt; &quot;d&quot; &#65; & e", 'a & b <c> "d" A & e', []),
        ("<b>x <i>y</i></b>", "x y", [("bold", 0, 3), ("italic", 2, 1)]),
        ("😀 <u>z</u>", "😀 z", [("underline", 3, 1)]),  # offsets in UTF-16 units
        ('<a href="https://x.org/?a=1&amp;b=2">l</a>', "l", [("text_link", 0, 1)]),
        ('<pre><code class="language-py">p</code></pre>', "p", [("pre", 0, 1)]),
        ("<blockquote expandable>q</blockquote>", "q", [("expandable_blockquote", 0, 1)]),
        ('<span class="tg-spoiler">s</span>', "s", [("spoiler", 0, 1)]),
    ],
)
def test_telegram_html_parser(html: str, plain: str, entities: list[tuple[str, int, int]]) -> None:
    from tests.fakes._tg_html import parse_html

    text, found = parse_html(html)
    assert text == plain
    assert [(e["type"], e["offset"], e["length"]) for e in found] == entities


@pytest.mark.parametrize(
    ("html", "error"),
    [
        ("a < b", 'Unsupported start tag "" at byte offset 2'),
        ("x <br> y", 'Unsupported start tag "br" at byte offset 2'),
        ("é <b", "Unclosed start tag at byte offset 3"),
        ("</b>", "Unexpected end tag at byte offset 0"),
        ("<b>x</i>", 'Unmatched end tag at byte offset 4, expected "</b>", found "</i>"'),
        ("<i>x", 'Can\'t find end tag corresponding to start tag "i"'),
        ("<span>x</span>", 'Tag "span" must have class "tg-spoiler" at byte offset 0'),
    ],
)
def test_telegram_html_parser_errors(html: str, error: str) -> None:
    from tests.fakes._tg_html import HtmlError, parse_html

    with pytest.raises(HtmlError) as info:
        parse_html(html)
    assert str(info.value) == error


async def test_http_control_endpoints(tg: FakeTelegram, llm: FakeAnthropic, bot: Bot) -> None:
    import base64

    from tests.fakes import FakeControl

    tgc, llmc = FakeControl(tg.base_url), FakeControl(llm.base_url)
    # urllib blocks: call the control clients off the event loop.
    call = asyncio.to_thread

    await call(
        tgc.post,
        "photo",
        {"chat_id": 9, "user_id": 9, "image_b64": base64.b64encode(png_bytes()).decode()},
    )
    cb = await call(
        tgc.post, "callback", {"user_id": 9, "chat_id": 9, "message_id": 1, "data": "d"}
    )
    await call(tgc.post, "fail", {"method": "sendMessage", "status": 429, "retry_after": 2})
    updates = await bot.get_updates()
    assert updates[0].message is not None and updates[0].message.photo
    assert updates[1].callback_query is not None
    assert updates[1].callback_query.id == cb["result"]["callback_query_id"]
    with pytest.raises(TelegramRetryAfter):
        await bot.send_message(9, "x")
    await bot.send_message(9, "y")
    state = await call(tgc.get, "state")
    assert [s["text"] for s in state["sent"]] == ["y"] and len(state["pending_updates"]) == 2
    assert [r["method"] for r in await call(tgc.get, "requests", method="sendMessage")] == [
        "sendMessage",
        "sendMessage",
    ]

    client = anthropic.AsyncAnthropic(api_key="k", base_url=llm.base_url, max_retries=0)
    await call(llmc.post, "hold")
    await call(llmc.post, "enqueue", {"kind": "tool_use", "name": "t", "input": {"a": 1}})
    pending = asyncio.create_task(
        client.messages.create(model=MODEL, max_tokens=5, messages=user("x"))
    )
    await call(llmc.get, "wait_requests", count=1)
    assert (await call(llmc.get, "state"))["queued"] == 1
    await call(llmc.post, "release")
    msg = await asyncio.wait_for(pending, 5)
    assert msg.content[0].type == "tool_use" and msg.content[0].input == {"a": 1}
    await client.close()


async def test_leave_chat_and_membership_updates_as_telegram_sends_them(
    tg: FakeTelegram, bot: Bot
) -> None:
    tg.add_bot_to_group(-42, 7, bot_id=123456)
    (update,) = await bot.get_updates(allowed_updates=["my_chat_member"])
    change = update.my_chat_member
    assert change is not None and change.chat.id == -42 and change.from_user.id == 7
    assert (change.old_chat_member.status, change.new_chat_member.status) == ("left", "member")
    assert change.new_chat_member.user.id == 123456
    assert await bot.leave_chat(-42) is True
    assert tg.left == [-42]
    with pytest.raises(TelegramForbiddenError, match="not a member"):
        await bot.send_message(-42, "still here?")
    with pytest.raises(TelegramForbiddenError):
        await bot.leave_chat(-42)  # gone already
    tg.add_chat(9, "private", 9)
    with pytest.raises(TelegramBadRequest, match="private chats"):
        await bot.leave_chat(9)


async def test_mentions_and_commands_get_entities_in_utf16_units(
    tg: FakeTelegram, bot: Bot
) -> None:
    tg.add_message(-5, 7, "👋 @fake_bot and @other_bot, mail x@fake_bot.example", chat_type="group")
    tg.add_message(-5, 7, "/help@fake_bot now", chat_type="group")
    first, second = await bot.get_updates()
    text = first.message.text
    mentions = [e.extract_from(text) for e in first.message.entities]
    assert mentions == ["@fake_bot", "@other_bot"]  # aiogram slices by UTF-16 offsets
    assert [(e.type, e.extract_from(second.message.text)) for e in second.message.entities] == [
        ("bot_command", "/help@fake_bot")
    ]
