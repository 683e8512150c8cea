"""Automations that use a secret listed in `[automations] secrets` the way real API clients
do, and fail with an error that quotes it escaped (tests/test_e2e_secrets.py)."""

from __future__ import annotations

import aiohttp
from pydantic import BaseModel

from agentd.automations import AutoStep, workflow
from agentd.durable.step import Retry, StepFailed

ONCE = Retry(limit=1, delay=0.01)


class Target(BaseModel):
    url: str = ""


class Done(BaseModel):
    ok: bool


async def _lookup(url: str, token: str) -> bool:
    """A token as a query parameter: aiohttp percent-encodes it, and a refused call's error
    names the URL."""
    async with aiohttp.ClientSession() as http, http.get(url, params={"token": token}) as resp:
        resp.raise_for_status()
        return True


@workflow("secret_in_query", input=Target, output=Done)
async def secret_in_query(step: AutoStep, inp: Target) -> Done:
    ok = await step.do("lookup", _lookup, inp.url, step.secret("TEST_QUERY_TOKEN"), retry=ONCE)
    return Done(ok=ok)


async def _login(password: str) -> bool:
    """A client library whose refusal quotes what it was given (the repr of its argument)."""
    raise PermissionError(f"login refused for password={password!r}")


@workflow("secret_in_repr", input=Target, output=Done)
async def secret_in_repr(step: AutoStep, inp: Target) -> Done:
    ok = await step.do("login", _login, step.secret("TEST_PASSWORD"), retry=ONCE)
    return Done(ok=ok)


async def _basic_auth_call(url: str, password: str) -> bool:
    """HTTP Basic as a user agentd never heard of; a client whose refusal quotes the headers
    it sent (as many API wrappers do), so the error holds the base64 of "user:password"."""
    auth = {"Authorization": aiohttp.encode_basic_auth("ci-robot", password)}
    async with aiohttp.ClientSession() as http, http.get(url, headers=auth) as resp:
        if resp.status >= 400:
            sent = dict(resp.request_info.headers)
            raise PermissionError(f"{resp.status} from {url}, having sent {sent!r}")
        return True


@workflow("secret_in_basic_auth", input=Target, output=Done)
async def secret_in_basic_auth(step: AutoStep, inp: Target) -> Done:
    ok = await step.do("call", _basic_auth_call, inp.url, step.secret("TEST_PASSWORD"), retry=ONCE)
    return Done(ok=ok)


@workflow("secret_in_notice", input=Target, output=Done)
async def secret_in_notice(step: AutoStep, inp: Target) -> Done:
    """A common shape: the call's error is told to the owner, asked about and given to the
    model to judge (the code holds the token, and quotes it)."""
    token = step.secret("TEST_QUERY_TOKEN")
    try:
        await step.do("lookup", _lookup, inp.url, token, retry=ONCE)
    except StepFailed as exc:
        await step.send("told", f"The lookup failed: {exc.message}; token was {token}")
        await step.ask_owner(f"Retry with {token}?", ["yes", "no"], timeout=0.5, default="no")
        judged = await step.llm(
            "judge", f"Is this worth a retry? {exc.message} (token {token})", output=Done
        )
        return judged
    return Done(ok=True)
