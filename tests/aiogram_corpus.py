"""Parse tests/data/telegram_updates.json through aiogram and print what came out, as JSON.

Run as `python -m tests.aiogram_corpus lazy|eager|broken|changed`: one aiogram import per process,
so the lazy and the eager path are each measured in a fresh interpreter and compared by
tests/test_aiogram_loader.py. Methods go through a real `Bot` and aiogram's own response check,
called the way agentd calls them; only the HTTP round trip is replaced by the corpus answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentd.telegram import aiogram_loader

CORPUS = Path(__file__).parent / "data" / "telegram_updates.json"


def _shape(value: Any) -> Any:
    """Values plus the class of every nested object: equal dumps of different classes differ."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        fields = {k: _shape(v) for k, v in value if v is not None}
        extra = value.model_extra or {}
        return {
            "__class__": type(value).__name__,
            **fields,
            **{k: _shape(v) for k, v in extra.items()},
        }
    if isinstance(value, list | tuple):
        return [_shape(v) for v in value]
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return value if isinstance(value, str | int | float | bool) or value is None else repr(value)


def _dump(update: Any) -> Any:
    """What the poller stores (or the error it meets: that must match across paths too)."""
    try:
        return update.model_dump(mode="json", exclude_none=True, by_alias=True)
    except Exception as exc:
        return ["error", type(exc).__name__, str(exc)]


def _updates(corpus: dict[str, Any]) -> dict[str, Any]:
    from aiogram.types import Update

    out: dict[str, Any] = {}
    for name, raw in corpus["updates"].items():
        update = Update.model_validate(raw)
        out[name] = {
            "event_type": update.event_type,
            "content_type": getattr(update.event, "content_type", None),
            "shape": _shape(update),
            "dump": _dump(update),
        }
    for name, raw in corpus["malformed"].items():
        try:
            Update.model_validate(raw)
            out[name] = "accepted"
        except Exception as exc:
            errors = getattr(exc, "errors", lambda: [])()
            out[name] = [type(exc).__name__, sorted(str(e["loc"]) for e in errors)]
    return out


async def _methods(corpus: dict[str, Any]) -> dict[str, Any]:
    from aiogram import Bot
    from aiogram.client.session.base import BaseSession
    from aiogram.enums import ChatAction, ParseMode
    from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, ReplyParameters

    responses = dict(corpus["responses"])
    responses["getUpdates"] = {"ok": True, "result": list(corpus["updates"].values())}
    answers: list[str] = []
    sent: list[Any] = []

    class CorpusSession(BaseSession):
        async def make_request(self, bot, method, timeout=None):  # type: ignore[no-untyped-def]
            sent.append(_shape(method))
            response = self.check_response(
                bot=bot, method=method, status_code=200, content=answers.pop(0)
            )
            return response.result

        async def stream_content(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        async def close(self) -> None:
            return None

    bot = Bot("123456:TEST-token-abcdef", session=CorpusSession())
    keyboard = InlineKeyboardMarkup(
        inline_keyboard=[[InlineKeyboardButton(text="Approve", callback_data="appr:8:yes")]]
    )
    calls = {
        "getMe": lambda: bot.get_me(),
        "getUpdates": lambda: bot.get_updates(
            offset=5, timeout=1, allowed_updates=["message", "edited_message", "callback_query"]
        ),
        "sendMessage": lambda: bot.send_message(
            42,
            "Tomorrow: <b>dentist</b> at 10:00.",
            parse_mode=ParseMode.HTML,
            reply_markup=keyboard,
            reply_parameters=ReplyParameters(message_id=1212),
        ),
        "editMessageText": lambda: bot.edit_message_text(
            text="Tomorrow: dentist at 10:30.",
            chat_id=42,
            message_id=1213,
            parse_mode=ParseMode.HTML,
        ),
        "editMessageText_inline": lambda: bot.edit_message_text(
            text="done", inline_message_id="AAAB-inline"
        ),
        "sendChatAction": lambda: bot.send_chat_action(42, ChatAction.TYPING),
        "sendMessageDraft": lambda: bot.send_message_draft(chat_id=42, draft_id=1, text="Tom"),
        "answerCallbackQuery": lambda: bot.answer_callback_query(
            "4382bfdwdsb323b2d9", text="Approved", show_alert=False
        ),
        "getFile": lambda: bot.get_file("AgACAgIAAxkBAAIBxWZ1-large"),
        "error_bad_request": lambda: bot.send_message(42, "<foo>", parse_mode=ParseMode.HTML),
        "error_retry_after": lambda: bot.send_message(42, "again"),
    }
    out: dict[str, Any] = {}
    for name, call in calls.items():
        answers.append(json.dumps(responses[name]))
        try:
            out[name] = {"result": _shape(await call())}
        except Exception as exc:
            out[name] = {"error": [type(exc).__name__, str(exc), getattr(exc, "retry_after", None)]}
        out[name]["request"] = sent[-1]
    return out


@contextlib.contextmanager
def _unpatched(_namespace: dict[str, Any]) -> Iterator[None]:
    yield


def main(argv: list[str]) -> None:
    mode = argv[0]
    logging.basicConfig(level=logging.WARNING, format="LOG %(message)s", stream=sys.stdout)
    if mode == "broken":  # the lazy set-up fails after aiogram imported: the fallback must cope
        aiogram_loader._build_on_demand = _fail  # type: ignore[assignment]
    if mode == "changed":  # a release whose types no longer hand their namespace to the loop
        aiogram_loader._rebuild_loop_skipped = _unpatched  # type: ignore[assignment]
    loaded = aiogram_loader.load(lazy=mode != "eager")
    built = _built_types()
    corpus = json.loads(CORPUS.read_text())
    result = {
        "mode": loaded,
        "built_at_load": built,
        "updates": _updates(corpus),
        "methods": asyncio.run(_methods(corpus)),
    }
    print("RESULT " + json.dumps(result, sort_keys=True))


def _built_types() -> list[int]:
    """[types with a built schema, all types]: what the import itself paid for."""
    import aiogram.types

    models = [getattr(aiogram.types, name) for name in aiogram.types.__all__]
    models = [m for m in models if hasattr(m, "__pydantic_complete__")]
    return [sum(m.__pydantic_complete__ for m in models), len(models)]


def _fail(namespace: Any) -> None:
    raise RuntimeError("simulated lazy set-up failure")


if __name__ == "__main__":
    main(sys.argv[1:])
