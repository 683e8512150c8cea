"""The webhook listener (`[automations.hooks]`, off by default): `POST /hooks/NAME` starts the
hook's automation (or a turn in the owner's chat) with the JSON body;
`POST /hooks/NAME/events/EVENT` signals one of its instances.

Every request is verified before anything else is read into memory past the size limit: an
HMAC-SHA256 of the raw body under the hook's own secret (`X-Hub-Signature-256` as GitHub sends
it, or `X-Signature-256`; `sha256=<hex>`, compared in constant time), over
"<timestamp>.<body>" where the hook names a signed timestamp header (a stale one is refused).
The body's digest, not the unsigned delivery id, makes a delivery one: a repeat within the
retry window starts nothing new, at this hook or any other (hook_guard.py), and starts are
rate-limited per hook. The answer (202 and the instance id) comes only after the start is
committed to disk. It listens on 127.0.0.1 or a Unix socket: put a reverse proxy in front to
take deliveries from the internet (docs/workflows.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from agentd.automations import hook_guard, runs
from agentd.automations.hook_notice import BadSignatureNotice
from agentd.automations.owner import owner
from agentd.automations.runtime import Runtime
from agentd.chat import reach
from agentd.chat.inputs import MAX_TEXT_CHARS, TurnInput
from agentd.chat.names import TURN_WORKFLOW, chat_key
from agentd.config import Config, HookConfig, read_secret
from agentd.durable import InstanceNotFound, InvalidInput, WorkflowNotFound
from agentd.net.bodies import read_at_most
from agentd.tools import mark_untrusted

log = logging.getLogger("agentd.hooks")
BODY_TIMEOUT = 10.0  # seconds to send the body: a slow sender does not hold a slot for ever
MAX_DELIVERY_ID = 200
StartWorkflow = Callable[..., Awaitable[Any]]


def signature_ok(secret: bytes, body: bytes, header: str) -> bool:
    """`sha256=<hex>` of the body under the secret, compared in constant time."""
    scheme, _, given = header.strip().partition("=")
    if scheme.lower() != "sha256" or not given:
        return False
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
    # As bytes: compare_digest refuses non-ASCII str, and a header may hold anything.
    return hmac.compare_digest(expected, given.strip().lower().encode("utf-8", "replace"))


def _signed(hook: HookConfig, request: web.Request, body: bytes) -> bytes:
    """What the sender signed: the body, or "<timestamp>.<body>" where it signs a timestamp
    (refused when missing or stale)."""
    if not hook.timestamp_header:
        return body
    stamp = request.headers.get(hook.timestamp_header, "")
    why = hook_guard.stale_timestamp(stamp, time.time(), hook.max_age_seconds)
    if why is not None:
        raise _Refused(401, why)
    return stamp.strip().encode() + b"." + body


def _fresh_socket_path(raw: str) -> str:
    """The socket's path, with a stale socket from an earlier run removed (start-up only)."""
    path = Path(raw).expanduser()
    if path.is_socket():
        path.unlink()
    return str(path)


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.response = _error(status, message)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _refusal(exc: Exception) -> web.Response:
    """A start that created nothing: 422 for the data, 503 when its automation is not
    loaded (the owner's to fix), 409 for an id another automation holds."""
    if isinstance(exc, InvalidInput):
        return _error(422, str(exc))
    if isinstance(exc, WorkflowNotFound):
        return _error(503, str(exc))
    return _error(409, str(exc))


@dataclass
class _Route:
    name: str
    config: HookConfig
    secret: bytes | None  # None: its secret_env is unset, so it refuses every delivery


class HookServer:
    def __init__(
        self,
        config: Config,
        runtime: Runtime,
        start_workflow: StartWorkflow,
        wake: Callable[[], Awaitable[None]],
        env: Mapping[str, str] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._now = now
        # The one secret reader: the environment, then agentd.env, then a credential.
        secrets = config.secret_source(env)
        self._config = config
        self._max = config.hooks.max_body_bytes
        self._runtime = runtime
        self._start_workflow = start_workflow
        self._wake = wake
        self._tell_bad_signature = BadSignatureNotice(config, runtime.db, start_workflow, now)
        self._runner: web.AppRunner | None = None
        self.routes: dict[str, _Route] = {}
        # One memory for every hook: a body taken by one is a replay at any other.
        windows = [h.replay_window_seconds for h in config.hooks.routes.values()]
        self._seen = hook_guard.Seen(float(max(windows, default=86_400)), runtime.db)
        self._rates = {
            name: hook_guard.StartRate(h.max_starts_per_minute, runtime.db)
            for name, h in config.hooks.routes.items()
        }
        for name, hook in config.hooks.routes.items():
            secret = read_secret(hook.secret_env, secrets)
            if not secret:
                log.warning(
                    "hook has no secret; it refuses every delivery",
                    extra={"hook": name, "secret_env": hook.secret_env},
                )
            if hook.workflow and hook.workflow not in runtime.catalog.versions:
                log.warning(
                    "hook starts an automation that is not loaded; it answers 503",
                    extra={"hook": name, "workflow": hook.workflow},
                )
            self.routes[name] = _Route(name, hook, secret.encode() if secret else None)

    async def start(self) -> str:
        """Listen; return where (for the log and the tests)."""
        app = web.Application(client_max_size=self._max)
        app.router.add_post("/hooks/{name}", self._start)
        app.router.add_post("/hooks/{name}/events/{event}", self._event)
        app.router.add_post("/hooks/{name}/status", self._status)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        listen = self._config.hooks.listen
        if listen.startswith("unix:"):
            path = _fresh_socket_path(listen[5:])
            site: web.BaseSite = web.UnixSite(self._runner, path)
            await site.start()
            os.chmod(path, 0o660)  # the proxy's group may write; nobody else
        else:
            host, _, port = listen.rpartition(":")
            site = web.TCPSite(self._runner, host or "127.0.0.1", int(port))
            await site.start()
        where = listen
        if not listen.startswith("unix:") and listen.endswith(":0"):
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                where = f"{sockets[0].getsockname()[0]}:{sockets[0].getsockname()[1]}"
        log.info("hooks listening", extra={"listen": where, "hooks": sorted(self.routes)})
        return where

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the two endpoints ------------------------------------------------------------------

    async def _verified(self, request: web.Request) -> tuple[_Route, Any, str]:
        """Route, parsed JSON body and the body's digest; raise an HTTP error response
        otherwise (a bad signature, a stale signed timestamp, a body taken before)."""
        route = self.routes.get(request.match_info["name"])
        if route is None:
            raise _Refused(404, "no such hook")
        if route.secret is None:
            raise _Refused(503, "this hook has no secret configured")
        if (request.content_length or 0) > self._max:
            raise _Refused(413, f"body over {self._max} bytes")
        try:
            async with asyncio.timeout(BODY_TIMEOUT):
                body = await read_at_most(request.content, self._max + 1)
        except TimeoutError:
            raise _Refused(408, "the body took too long") from None
        if len(body) > self._max:
            raise _Refused(413, f"body over {self._max} bytes")
        header = next(
            (request.headers[h] for h in route.config.signature_headers if h in request.headers),
            None,
        )
        if header is None:
            raise _Refused(401, "missing signature")
        if not signature_ok(route.secret, _signed(route.config, request, body), header):
            log.warning("hook signature mismatch", extra={"hook": route.name})
            await self._tell_bad_signature(route.name, route.config.secret_env)
            raise _Refused(401, "bad signature")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):  # nesting past the stack too
            raise _Refused(400, "the body is not JSON") from None
        if not isinstance(data, dict):
            raise _Refused(400, "the body must be a JSON object")
        delivery = next(
            (request.headers[h] for h in route.config.delivery_headers if h in request.headers),
            None,
        )
        if delivery is not None and not 1 <= len(delivery) <= MAX_DELIVERY_ID:
            raise _Refused(400, f"the delivery id must be 1-{MAX_DELIVERY_ID} characters")
        # The delivery id is not signed: the body's digest is what makes a delivery one.
        return route, data, hook_guard.digest(body)

    async def _replayed(self, route: _Route, body_digest: str) -> web.Response | None:
        """The answer to a body taken before within the window, or None for a new one."""
        earlier = await self._seen.earlier(body_digest, self._now())
        if earlier is None:
            return None
        hook, iid = earlier
        if hook != route.name:
            log.warning("hook body replayed at another hook", extra={"hook": route.name})
            return _error(409, "this signed body was already delivered to another hook")
        return web.json_response({"instance_id": iid, "created": False}, status=200)

    async def _start(self, request: web.Request) -> web.Response:
        try:
            route, data, body_digest = await self._verified(request)
        except _Refused as refused:
            return refused.response
        replayed = await self._replayed(route, body_digest)
        if replayed is not None:
            return replayed
        if not await self._rates[route.name].allow(route.name, self._now()):
            log.warning("hook start rate exceeded", extra={"hook": route.name})
            return _error(429, "too many starts for this hook; retry in a minute")
        now = self._now()
        delivery = hook_guard.replay_key(body_digest, now, route.config.replay_window_seconds)
        try:
            if route.config.workflow:
                name = route.config.workflow
                iid = runs.instance_id_for(name, f"{route.name}:{delivery}", scope="h")
                started = await self._runtime.start(
                    name, data, instance_id=iid, source=f"hook:{route.name}"
                )
                iid, created = started.instance_id, started.created
            else:
                iid, created = await self._start_turn(route, data, delivery)
        except (InvalidInput, WorkflowNotFound, ValueError) as exc:
            # Nothing started: the token returns, so a sender retrying once the owner has
            # fixed the cause (a typo, an automation not loaded) is not locked out.
            await self._rates[route.name].give_back(route.name)
            return _refusal(exc)
        await self._seen.remember(body_digest, route.name, iid, now)
        log.info("hook delivery", extra={"hook": route.name, "instance_id": iid, "new": created})
        body = {"instance_id": iid, "created": created}
        return web.json_response(body, status=202 if created else 200)

    async def _start_turn(
        self, route: _Route, data: dict[str, Any], delivery: str
    ) -> tuple[str, bool]:
        user = owner(self._config)
        if user is None:
            raise WorkflowNotFound("no owner to run a prompt for: set [access] allowed_user_ids")
        # The owner's private chat where notices find them (chat/reach.py); the turn's input
        # is journaled with it, so a turn started before keeps the chat it had.
        prefer = self._config.access.notices
        chat = await self._runtime.db.read(reach.private_chat, user, prefer)
        if chat is None:
            raise WorkflowNotFound(
                "the owner has no private chat with the agent on any channel yet: write to it "
                "once, then send the hook again"
            )
        payload = json.dumps(data, ensure_ascii=False, indent=1)
        text = f"{route.config.prompt}\n\n{mark_untrusted(payload, f'webhook {route.name}')}"
        if len(text) > MAX_TEXT_CHARS:
            raise InvalidInput(f"the body is too long for a prompt ({MAX_TEXT_CHARS} characters)")
        # The body is the sender's, not the owner's: the turn is tainted from its first call.
        turn = TurnInput(
            origin="webhook",
            chat_id=chat,
            chat_kind="private",
            user_id=user,
            date=time.time(),
            kind="text",
            text=text,
            outside_source=f"a webhook delivery ({route.name})",
        )
        iid = runs.instance_id_for(f"hook_{route.name}", delivery, scope="h")
        result = await self._start_workflow(
            TURN_WORKFLOW, turn, instance_id=iid, key=chat_key(chat)
        )
        return iid, bool(result.created)

    async def _event(self, request: web.Request) -> web.Response:
        try:
            route, data, body_digest = await self._verified(request)
        except _Refused as refused:
            return refused.response
        if await self._seen.earlier(body_digest, self._now()) is not None:
            return _error(409, "this signed body was already delivered")
        event = request.match_info["event"]
        if event.startswith(runs.ANSWER_PREFIX):
            # The owner's answers (and approvals of high-risk tools) are the owner's: a
            # webhook's sender may signal its workflow, never answer for the owner.
            return _error(403, "answers to the owner's questions cannot come from a webhook")
        iid = data.get("instance_id") or request.query.get("instance_id")
        payload = data.get("data", {})
        if not isinstance(iid, str) or not isinstance(payload, dict):
            return _error(422, 'give {"instance_id": "...", "data": {...}}')
        workflow = route.config.workflow or None
        if workflow is None:
            return _error(404, "this hook starts prompts; it has no instances to signal")
        now = self._now()
        key = hook_guard.replay_key(body_digest, now, route.config.replay_window_seconds)
        event_id = f"hook:{route.name}:{key}"
        try:
            delivered = await self._runtime.db.write(
                partial(runs.signal, workflow=workflow, catalog=self._runtime.catalog),
                iid,
                event,
                payload,
                now,
                event_id,
            )
        except InstanceNotFound as exc:
            return _error(404, str(exc))
        except InvalidInput as exc:  # a field the event's model refuses, a choice not offered
            return _error(422, str(exc))
        except ValueError as exc:
            return _error(409, str(exc))
        if delivered:
            await self._seen.remember(body_digest, route.name, iid, now)
        await self._wake()
        return web.json_response(
            {"instance_id": iid, "event": event, "delivered": delivered},
            status=202 if delivered else 200,
        )

    async def _status(self, request: web.Request) -> web.Response:
        """Where one of the route's instances is: status, the event it waits for and the
        choices it offered, its output or error. A read: a repeated body answers again (sign a
        timestamp, `timestamp_header`, to bound how long a captured request keeps working)."""
        try:
            route, data, _ = await self._verified(request)
        except _Refused as refused:
            return refused.response
        iid = data.get("instance_id")
        if not isinstance(iid, str) or not route.config.workflow:
            return _error(422, 'give {"instance_id": "..."} to a route that starts a workflow')
        try:
            state = await self._runtime.db.read(runs.state, iid)
        except InstanceNotFound:
            state = None
        if state is None or state.workflow != route.config.workflow:
            return _error(404, f"no instance {iid!r} of workflow {route.config.workflow!r}")
        return web.json_response(state.model_dump(mode="json"))
