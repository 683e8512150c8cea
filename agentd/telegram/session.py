"""Every Bot API call goes through here: one error classification, one retry policy.

The policy is an aiogram request middleware on the bot's session, so no call site can bypass
it or grow its own retry loop. The session itself decodes leniently (invalid UTF-8 and lone
surrogates become U+FFFD) and keeps the HTTP status of an answer that is not Bot API JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.exceptions import (
    ClientDecodeError,
    RestartingTelegram,
    TelegramAPIError,
    TelegramConflictError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.methods import Response, TelegramMethod
from aiogram.methods.base import TelegramType
from aiohttp import ClientConnectorError, ClientError, ClientTimeout, ConnectionTimeoutError

log = logging.getLogger("agentd.telegram")
Sleep = Callable[[float], Awaitable[None]]
# Called when a message-creating call may have reached the user although we saw it fail.
OnUncertain = Callable[[str, int | str | None, str], Awaitable[None]]

# Best effort by nature: retrying them only delays the turn (a draft or "typing…" is stale by
# the time a retry lands), and their failure never fails a turn (see TelegramOutbox).
BEST_EFFORT_METHODS = frozenset({"sendChatAction", "sendMessageDraft", "answerCallbackQuery"})
# Their callers loop until they succeed (the poller; start-up's wait for the network), and the
# poller must see a malformed batch at once.
SELF_RETRYING_METHODS = frozenset({"getUpdates", "getMe"})
# Methods that create something the user sees: repeating one after a lost answer duplicates.
CREATING_METHODS = frozenset({"sendMessage", "sendPhoto", "sendDocument", "sendMediaGroup"})
# Seconds to make a connection to the Bot API (a TCP and TLS handshake takes well under one).
CONNECT_TIMEOUT = 10.0
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class UndecodableAnswer(ClientDecodeError):
    """The server answered with something that is not Bot API JSON (a proxy page, a cut body)."""

    def __init__(self, original: ClientDecodeError, status: int) -> None:
        super().__init__(original.message, original.original, original.data)
        self.status = status


@dataclass(frozen=True)
class Fault:
    """What a failed call means: retry it (maybe after `wait`), or give up."""

    kind: Literal["transient", "permanent", "unauthorized"]
    reason: str
    retry_after: float | None = None
    # The request may have been carried out although no good answer came back.
    maybe_done: bool = False


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


def lenient_json_loads(text: str) -> Any:
    """JSON with lone surrogates (Telegram cuts texts inside emoji) replaced by U+FFFD."""
    value = json.loads(text)
    # A surrogate can only come from a \uD800-\uDFFF escape (the text was decoded from UTF-8
    # with errors replaced), so most answers need no walk over every string in them.
    return _clean(value) if _SURROGATE_ESCAPE.search(text) else value


# The Bot API's address carries the token (/bot<token>/method), and an HTTP library's error
# may quote the address (a redirect loop's does): a reason never keeps that segment, whole or
# cut (a cut token no redactor would know).
_TOKEN_SEGMENT = re.compile(r"/bot[^/\s'\"]*")


def _said(exc: TelegramAPIError, limit: int) -> str:
    return _TOKEN_SEGMENT.sub("/bot…", exc.message)[:limit]


def classify_fault(exc: BaseException) -> Fault:
    """The one classification of a Bot API failure: transient or permanent."""
    if isinstance(exc, TelegramRetryAfter):
        return Fault("transient", "429 flood control", retry_after=float(exc.retry_after))
    if isinstance(exc, TelegramUnauthorizedError):
        return Fault("unauthorized", "401 the bot token was rejected")
    if isinstance(exc, RestartingTelegram | TelegramServerError):
        return Fault("transient", f"server error: {_said(exc, 100)}")
    if isinstance(exc, TelegramConflictError):  # another poller or a webhook: may clear up
        return Fault("transient", "409 conflict: another getUpdates or a webhook is active")
    if isinstance(exc, UndecodableAnswer):
        # A cut 200 answer means Telegram did the work; a proxy's error page means it did not.
        return Fault(
            "transient",
            f"HTTP {exc.status} answer is not Bot API JSON",
            maybe_done=200 <= exc.status < 300,
        )
    if isinstance(exc, ClientDecodeError):
        return Fault("transient", "answer is not Bot API JSON", maybe_done=True)
    if isinstance(exc, TelegramNetworkError):
        # No connection was made (refused, no route, no name, connect timed out): not done.
        refused = isinstance(exc.__cause__, ClientConnectorError | ConnectionTimeoutError)
        return Fault("transient", f"network: {_said(exc, 100)}", maybe_done=not refused)
    if isinstance(exc, TelegramAPIError):
        return Fault("permanent", f"{type(exc).__name__}: {_said(exc, 200)}")
    if isinstance(exc, ClientError | TimeoutError | OSError):
        return Fault("transient", f"network: {type(exc).__name__}", maybe_done=True)
    return Fault("permanent", type(exc).__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long: `retries` more attempts, jittered backoff, capped waits."""

    retries: int = 5
    base_delay: float = 0.5
    max_backoff: float = 5.0
    max_retry_after: float = 300.0

    def wait(self, failures: int, retry_after: float | None = None) -> float:
        """Seconds before the next attempt after `failures` consecutive failures (≥ 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        # The exponent is capped: an outage of hours must not overflow a float.
        backoff = min(self.base_delay * 2 ** min(failures - 1, 30), self.max_backoff)
        return min(backoff + random.uniform(0, self.base_delay), self.max_backoff)


class RetryMiddleware(BaseRequestMiddleware):
    """Applies the policy to every call but getUpdates and getMe (their callers loop)."""

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        sleep: Sleep = asyncio.sleep,
        on_uncertain: OnUncertain | None = None,
    ) -> None:
        self.policy = policy
        self._sleep = sleep
        self.on_uncertain = on_uncertain

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        name = method.__api_method__
        if name in SELF_RETRYING_METHODS:
            return await make_request(bot, method)
        retries = 0 if name in BEST_EFFORT_METHODS else self.policy.retries
        failures = 0
        while True:
            try:
                return await make_request(bot, method)
            except Exception as exc:
                fault = classify_fault(exc)
                if fault.maybe_done and name in CREATING_METHODS and self.on_uncertain:
                    await self.on_uncertain(name, getattr(method, "chat_id", None), fault.reason)
                failures += 1
                if fault.kind != "transient" or failures > retries:
                    raise
                wait = self.policy.wait(failures, fault.retry_after)
                log.warning(
                    "telegram call failed, retrying",
                    extra={
                        "method": name,
                        "reason": fault.reason,
                        "attempt": failures,
                        "wait_s": round(wait, 2),
                    },
                )
                await self._sleep(wait)


class BotSession(AiohttpSession):
    """aiohttp session that decodes leniently and keeps the status of undecodable answers."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # aiogram builds `Response[<result type>]` for every answer, and pydantic caches generic
        # models only weakly: without a strong reference the class is collected and rebuilt
        # (schema and validator) on each call, which was a third of the daemon's CPU per turn.
        self._response_types: dict[Any, type[Response[Any]]] = {}

    def check_response(
        self, bot: Bot, method: TelegramMethod[TelegramType], status_code: int, content: str
    ) -> Response[TelegramType]:
        returning = method.__returning__
        if returning not in self._response_types:
            self._response_types[returning] = Response[returning]  # type: ignore[valid-type]
        return super().check_response(
            bot=bot, method=method, status_code=status_code, content=content
        )

    async def make_request(
        self, bot: Bot, method: TelegramMethod[TelegramType], timeout: int | None = None
    ) -> TelegramType:
        session = await self.create_session()
        url = self.api.api_url(token=bot.token, method=method.__api_method__)
        form = self.build_form_data(bot=bot, method=method)
        try:
            total = float(self.timeout if timeout is None else timeout)
            # A connection that cannot be made in CONNECT_TIMEOUT (a route that drops packets)
            # fails as one that was never made, not as a request that may have landed.
            limits = ClientTimeout(total=total, sock_connect=min(total, CONNECT_TIMEOUT))
            async with session.post(url, data=form, timeout=limits) as resp:
                # Invalid UTF-8 must not make a whole getUpdates batch unreadable forever.
                raw = (await resp.read()).decode("utf-8", errors="replace")
        except TimeoutError as e:
            raise TelegramNetworkError(method=method, message="Request timeout error") from e
        except ClientError as e:
            raise TelegramNetworkError(method=method, message=f"{type(e).__name__}: {e}") from e
        try:
            response = self.check_response(
                bot=bot, method=method, status_code=resp.status, content=raw
            )
        except ClientDecodeError as e:
            raise UndecodableAnswer(e, resp.status) from e.original
        return cast(TelegramType, response.result)
