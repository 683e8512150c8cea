"""A fault-injecting HTTP proxy between a real client and a fake (the fault suite's).

It forwards every request to its upstream and, when told to through `/_proxy/fault`, answers
one method (the last path segment: `sendMessage`, `messages`…) the way real servers and
proxies fail: refusing connections, dropping the connection before or after the upstream did
the work, hanging past the client's timeout, 429 with a retry hint, 5xx with the service's
JSON, nginx's HTML error pages, a 200 whose body is cut, a 404 from something that is not the
API, and for SSE streams a cut, garbled or unterminated stream. Faults are switched at run
time, so one daemon can be driven through many cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import aiohttp
from aiohttp import web

from tests.fakes._server import FakeServer

Flavour = Literal["telegram", "anthropic"]
MODES = (
    "refuse",  # the port stops listening for `seconds` (connection refused)
    "reset",  # the connection is closed before the request reaches upstream
    "drop",  # upstream does the work, then the connection closes without an answer
    "hang",  # no answer for `seconds` (longer than the client's timeout), upstream untouched
    "status",  # an error answer: `status` with a `body` of "json", "html" or "foreign"
    "cut",  # upstream does the work; its answer arrives cut in half (a clean, short body)
    "redirect",  # a 302 back to the same address, for ever (a captive portal, a broken proxy)
    "sse_drop",  # a streamed answer stops mid-way: the connection breaks
    "sse_garble",  # one streamed event carries broken JSON
    "sse_no_stop",  # the stream ends cleanly without message_stop
)
NGINX_PAGE = (
    "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n"
    "<center><h1>{status} {reason}</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n"
    "</body>\r\n</html>\r\n"
)
FOREIGN_404 = "404 page not found\n"  # what a Go service (or a wrong path on a proxy) answers
ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    529: "overloaded_error",
}
HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "content-encoding"}


@dataclass
class Fault:
    method: str
    mode: str
    times: int = 1
    status: int = 502
    body: str = "json"
    retry_after: float | None = None
    seconds: float = 2.0


@dataclass
class Seen:
    method: str
    fault: str | None


@dataclass
class _State:
    faults: list[Fault] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)


class FaultProxy(FakeServer):
    """Forward to `upstream`, failing on command; control at /_proxy/{fault,clear,seen}."""

    def __init__(self, upstream: str, flavour: Flavour, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.upstream = upstream.rstrip("/")
        self.flavour = flavour
        self._state = _State()
        self._client: aiohttp.ClientSession | None = None

    # -- control from the test ----------------------------------------------------------------

    def fail(self, method: str, mode: str, **options: Any) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown fault mode {mode!r}")
        fault = Fault(method=method, mode=mode, **options)
        if mode == "refuse":
            self._call_in_loop(lambda: asyncio.ensure_future(self._refuse(fault.seconds)))
            return
        with self._lock:
            self._state.faults.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._state.faults.clear()

    def seen(self, method: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self._state.seen if method is None or s.method == method]

    def pending_faults(self) -> list[Fault]:
        with self._lock:
            return list(self._state.faults)

    # -- serving --------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/_proxy/{name}", self._control)
        app.router.add_route("*", "/{tail:.*}", self._forward)

    def _on_loop_started(self) -> None:
        self._client = aiohttp.ClientSession(auto_decompress=False)

    async def stop(self) -> None:
        await super().stop()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _refuse(self, seconds: float) -> None:
        """Stop listening, so new connections are refused, then listen again on the same port."""
        assert self._runner is not None
        sites = list(self._runner.sites)
        for site in sites:
            await site.stop()
        await asyncio.sleep(seconds)
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()

    def _take(self, method: str) -> Fault | None:
        with self._lock:
            for fault in self._state.faults:
                if fault.method in (method, "*"):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._state.faults.remove(fault)
                    self._state.seen.append(Seen(method, fault.mode))
                    self._changed()
                    return fault
            self._state.seen.append(Seen(method, None))
            self._changed()
            return None

    async def _control(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "fault" and request.method == "POST":
            body = await request.json()
            self.fail(body.pop("method"), body.pop("mode"), **body)
            return web.json_response({"ok": True})
        if name == "clear":
            self.clear()
            return web.json_response({"ok": True})
        if name == "seen":
            return web.json_response([asdict(s) for s in self.seen()])
        return web.json_response({"error": f"unknown control {name}"}, status=404)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        method = request.path.rstrip("/").rsplit("/", 1)[-1]
        body = await request.read()
        fault = self._take(method)
        if fault is None:
            return await self._relay(request, body)
        if fault.mode == "reset":
            return self.drop_connection(request)
        if fault.mode == "hang":
            await asyncio.sleep(fault.seconds)
            return self.drop_connection(request)
        if fault.mode == "status":
            return self._error(fault)
        if fault.mode == "redirect":
            raise web.HTTPFound(request.path_qs)
        status, headers, payload = await self._upstream(request, body)
        if fault.mode == "drop":
            return self.drop_connection(request)
        if fault.mode == "cut":
            return web.Response(
                status=status,
                body=payload[: len(payload) // 2],
                headers={**headers, "Connection": "close"},
            )
        return await self._broken_stream(request, fault, status, headers, payload)

    async def _upstream(
        self, request: web.Request, body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        assert self._client is not None
        # The body was read whole (de-chunked, as nginx buffers it): its length is set anew.
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in {"host", *HOP_HEADERS}
        }
        async with self._client.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as resp:
            payload = await resp.read()
            kept = {k: v for k, v in resp.headers.items() if k.lower() not in HOP_HEADERS}
            return resp.status, kept, payload

    async def _relay(self, request: web.Request, body: bytes) -> web.StreamResponse:
        with contextlib.suppress(aiohttp.ClientError):
            status, headers, payload = await self._upstream(request, body)
            # Connection: close, so a refused port is seen at once (no pooled connection).
            return web.Response(
                status=status, body=payload, headers={**headers, "Connection": "close"}
            )
        return web.Response(status=502, text=self._nginx(502), content_type="text/html")

    @staticmethod
    def _nginx(status: int) -> str:
        reasons = {
            404: "Not Found",
            500: "Internal Server Error",
            502: "Bad Gateway",
            503: "Service Temporarily Unavailable",
            504: "Gateway Time-out",
        }
        return NGINX_PAGE.format(status=status, reason=reasons.get(status, "Error"))

    def _error(self, fault: Fault) -> web.Response:
        headers = {"Connection": "close"}
        if fault.body == "html":
            return web.Response(
                status=fault.status,
                text=self._nginx(fault.status),
                content_type="text/html",
                headers=headers,
            )
        if fault.body == "foreign":
            return web.Response(status=fault.status, text=FOREIGN_404, headers=headers)
        if self.flavour == "telegram":
            payload: dict[str, Any] = {
                "ok": False,
                "error_code": fault.status,
                "description": _tg_description(fault.status),
            }
            if fault.retry_after is not None:
                payload["parameters"] = {"retry_after": int(fault.retry_after)}
                payload["description"] += f": retry after {int(fault.retry_after)}"
        else:
            kind = ANTHROPIC_ERRORS.get(fault.status, "api_error")
            payload = {
                "type": "error",
                "error": {"type": kind, "message": kind},
                "request_id": "req_fault",
            }
            if fault.retry_after is not None:
                headers["retry-after"] = f"{fault.retry_after:g}"
            if fault.status == 529:
                headers["x-should-retry"] = "true"
        return web.json_response(payload, status=fault.status, headers=headers)

    async def _broken_stream(
        self,
        request: web.Request,
        fault: Fault,
        status: int,
        headers: dict[str, str],
        payload: bytes,
    ) -> web.StreamResponse:
        events = [e for e in payload.decode().split("\n\n") if e.strip()]
        if fault.mode == "sse_no_stop":
            events = [e for e in events if not e.startswith("event: message_stop")]
        elif fault.mode == "sse_garble":
            at = next(i for i, e in enumerate(events) if "content_block_delta" in e)
            broken = 'data: {"type": "content_block_delta", "ind'
            events[at] = re.sub(r"data: .*", broken, events[at])
        elif fault.mode == "sse_drop":
            at = next(i for i, e in enumerate(events) if "content_block_delta" in e)
            events = events[: at + 1]
        response = web.StreamResponse(status=status, headers={**headers, "Connection": "close"})
        await response.prepare(request)
        for event in events:
            await response.write(f"{event}\n\n".encode())
        if fault.mode == "sse_drop":
            await asyncio.sleep(0.05)  # let the events reach the client, then break the line
            if request.transport is not None:
                request.transport.abort()
            return response
        await response.write_eof()
        return response


def _tg_description(status: int) -> str:
    return {
        400: "Bad Request",
        403: "Forbidden: bot was blocked by the user",
        404: "Not Found",
        429: "Too Many Requests",
        500: "Internal Server Error",
        502: "Bad Gateway",
        503: "Service Unavailable",
    }.get(status, "Error")
