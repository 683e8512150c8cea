"""A small fake of the booking system the appointment automations call, for their tests and for
trying them out by hand (`python booking.py --port 8790`, then put
APPOINTMENTS_BOOKING_URL=http://127.0.0.1:8790 into agentd.env).

JSON endpoints (the interface the flows expect, in ../README.md "The HTTP interface"):

    GET  /customers?phone=+15550001111          {"customers": [{"id": "cust_001"}]}
    POST /customers/verify {"phone", "zip"}     {"customerId": "cust_001" | null}
    GET  /customers/ID/appointments             {"appointments": [{"id", "when", "service"}]}
    GET  /appointments/ID/slots                 {"slots": [{"id", "when"}]}
    POST /appointments/ID/reschedule {"slotId"} {"appointmentId", "slotId", "when"}
    POST /appointments/ID/cancel                {"cancelled": true} | 409 when `cancel_fails`
    (any change route answers 503 while its name is in `down`: an outage)
    POST /escalations {"kind", "reason", ...}   {"id": "esc_1"}

A change with an `Idempotency-Key` header is applied once: a repeat gets the first answer.
It counts every request (`calls`) and every change applied (`effects`), and can hold a request
(`hold`) until the client goes away or the test releases it: a test kills the daemon while a
step's request is in flight and checks that the step's effect still happens once.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

HoldWhen = Literal["before", "after"]  # before the change is applied, or after it


@dataclass
class Hold:
    route: str
    when: HoldWhen
    arrived: bool = False
    released: bool = False
    dropped: bool = False  # the client went away while held


@dataclass
class World:
    """The booking system's data: who calls from which phone, and what they have booked."""

    customers: dict[str, dict[str, str]] = field(default_factory=dict)  # id -> phone, zip
    appointments: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # by customer
    slots: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # by appointment


def sample_world() -> World:
    """Four customers: one with one appointment and one slot, one with two appointments and
    several slots, one whose appointment has no free slot, one with no appointment."""
    return World(
        customers={
            "cust_001": {"phone": "+15550001111", "zip": "94107"},
            "cust_002": {"phone": "+15550002222", "zip": "10001"},
            "cust_003": {"phone": "+15550003333", "zip": "60601"},
            "cust_004": {"phone": "+15550004444", "zip": "30301"},
        },
        appointments={
            "cust_001": [{"id": "appt_001", "when": "2026-12-01T09:00", "service": "ants"}],
            "cust_002": [
                {"id": "appt_002", "when": "2026-12-02T10:00", "service": "termites"},
                {"id": "appt_003", "when": "2026-12-09T14:00", "service": "wasps"},
            ],
            "cust_003": [{"id": "appt_004", "when": "2026-12-03T08:00", "service": "mice"}],
            "cust_004": [],
        },
        slots={
            "appt_001": [{"id": "slot_101", "when": "2026-12-04T09:00"}],
            "appt_002": [
                {"id": "slot_201", "when": "2026-12-05T10:00"},
                {"id": "slot_202", "when": "2026-12-06T15:00"},
            ],
            "appt_003": [{"id": "slot_301", "when": "2026-12-10T11:00"}],
            "appt_004": [],
        },
    )


class FakeBooking:
    """The service, run on its own event loop in a thread (`with FakeBooking.running() as b`)."""

    def __init__(self, world: World | None = None) -> None:
        self._first_world = copy.deepcopy(world or sample_world())
        self.world = copy.deepcopy(self._first_world)
        self.cancel_fails = False
        self.down: set[str] = set()  # routes ("cancel", "escalate", …) answering 503
        self.calls: Counter[str] = Counter()
        self.effects: list[tuple[str, ...]] = []
        self.url = ""
        self._answers: dict[str, tuple[int, dict[str, Any]]] = {}  # idempotency key -> answer
        self._holds: list[Hold] = []
        self._cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- for tests --------------------------------------------------------------------------

    def reset(self) -> None:
        """As new (its world, no calls, effects, remembered answers, holds or outages), so a
        test sharing one running service with others sees only its own requests."""
        with self._cond:
            for held in self._holds:
                held.released = True
            self._holds = []
            self.world = copy.deepcopy(self._first_world)
            self.cancel_fails = False
            self.down = set()
            self.calls = Counter()
            self.effects = []
            self._answers = {}
            self._cond.notify_all()

    def hold(self, route: str, when: HoldWhen = "before") -> Hold:
        """Hold the next request to `route` (e.g. "cancel") until released or dropped."""
        held = Hold(route, when)
        with self._cond:
            self._holds.append(held)
        return held

    def release(self, held: Hold) -> None:
        with self._cond:
            held.released = True
            self._cond.notify_all()

    def wait(self, check: Any, timeout: float = 60.0, what: str = "") -> Any:
        """Block until check() is truthy (re-checked whenever a request changes something)."""
        with self._cond:
            value = self._cond.wait_for(check, timeout)
        if not value:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or check}")
        return value

    def effect_count(self, kind: str) -> int:
        with self._cond:
            return sum(1 for e in self.effects if e[0] == kind)

    # -- the service ------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/customers", self._lookup)
        app.router.add_post("/customers/verify", self._verify)
        app.router.add_get("/customers/{id}/appointments", self._appointments)
        app.router.add_get("/appointments/{id}/slots", self._slots)
        app.router.add_post("/appointments/{id}/reschedule", self._reschedule)
        app.router.add_post("/appointments/{id}/cancel", self._cancel)
        app.router.add_post("/escalations", self._escalate)
        return app

    async def _gate(self, request: web.Request, route: str, when: HoldWhen) -> bool:
        """Wait out a hold on this route; False when the client went away meanwhile."""
        with self._cond:
            held = next((h for h in self._holds if h.route == route and h.when == when), None)
            if held is None:
                return True
            self._holds.remove(held)
            held.arrived = True
            self._cond.notify_all()
        while True:
            transport = request.transport
            gone = transport is None or transport.is_closing()
            with self._cond:
                if gone:
                    held.dropped = True
                    self._cond.notify_all()
                    return False
                if held.released:
                    return True
            await asyncio.sleep(0.01)

    def _count(self, route: str) -> None:
        with self._cond:
            self.calls[route] += 1
            self._cond.notify_all()

    async def _read(self, request: web.Request, route: str) -> dict[str, Any] | None:
        """Count the request and wait out a hold; None: the client is gone, answer nothing."""
        self._count(route)
        if not await self._gate(request, route, "before"):
            return None
        return await request.json() if request.can_read_body else {}

    async def _change(self, request: web.Request, route: str, apply: Any) -> web.StreamResponse:
        """A change: applied once per idempotency key, held before or after if asked."""
        body = await self._read(request, route)
        if body is None:
            return web.Response(status=499)
        if route in self.down:
            self.effects.append(("down", route))
            return web.json_response({"error": f"{route} is down for maintenance"}, status=503)
        key = request.headers.get("Idempotency-Key", "")
        with self._cond:
            answer = self._answers.get(key) if key else None
            if answer is None:
                answer = apply(body)
                if key:
                    self._answers[key] = answer
            self._cond.notify_all()
        if not await self._gate(request, route, "after"):
            return web.Response(status=499)
        return web.json_response(answer[1], status=answer[0])

    async def _lookup(self, request: web.Request) -> web.StreamResponse:
        if await self._read(request, "lookup") is None:
            return web.Response(status=499)
        phone = request.query.get("phone", "")
        found = [{"id": cid} for cid, c in self.world.customers.items() if c["phone"] == phone]
        return web.json_response({"customers": found})

    async def _verify(self, request: web.Request) -> web.StreamResponse:
        body = await self._read(request, "verify")
        if body is None:
            return web.Response(status=499)
        match = next(
            (
                cid
                for cid, c in self.world.customers.items()
                if c["phone"] == body.get("phone") and c["zip"] == body.get("zip")
            ),
            None,
        )
        return web.json_response({"customerId": match})

    async def _appointments(self, request: web.Request) -> web.StreamResponse:
        if await self._read(request, "appointments") is None:
            return web.Response(status=499)
        booked = self.world.appointments.get(request.match_info["id"], [])
        return web.json_response({"appointments": booked})

    async def _slots(self, request: web.Request) -> web.StreamResponse:
        if await self._read(request, "slots") is None:
            return web.Response(status=499)
        return web.json_response({"slots": self.world.slots.get(request.match_info["id"], [])})

    async def _reschedule(self, request: web.Request) -> web.StreamResponse:
        appt = request.match_info["id"]

        def apply(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            slot = next(
                (s for s in self.world.slots.get(appt, []) if s["id"] == body.get("slotId")),
                None,
            )
            if slot is None:
                return 404, {"error": f"no free slot {body.get('slotId')!r} for {appt}"}
            self.effects.append(("reschedule", appt, slot["id"]))
            return 200, {"appointmentId": appt, "slotId": slot["id"], "when": slot["when"]}

        return await self._change(request, "reschedule", apply)

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        appt = request.match_info["id"]

        def apply(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            if self.cancel_fails:
                self.effects.append(("cancel_refused", appt))
                return 409, {"error": f"{appt} is locked: a technician is already on the way"}
            self.effects.append(("cancel", appt))
            return 200, {"cancelled": True}

        return await self._change(request, "cancel", apply)

    async def _escalate(self, request: web.Request) -> web.StreamResponse:
        def apply(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            ticket = f"esc_{sum(1 for e in self.effects if e[0] == 'escalate') + 1}"
            self.effects.append(("escalate", ticket, str(body.get("kind"))))
            return 201, {"id": ticket}

        return await self._change(request, "escalate", apply)

    # -- running ----------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeBooking:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=0.5)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, host, port)
            loop.run_until_complete(site.start())
            bound = self._runner.addresses[0][1]
            self.url = f"http://{host}:{bound}"
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="fake-booking", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake booking service did not start in 10 s")
        return self

    def stop(self) -> None:
        with self._cond:
            for held in self._holds:
                held.released = True
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> FakeBooking:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--cancel-fails", action="store_true", help="refuse every cancellation")
    args = parser.parse_args()
    booking = FakeBooking()
    booking.cancel_fails = args.cancel_fails
    booking.start(port=args.port)
    print(f"fake booking system on {booking.url} (Ctrl-C stops it)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        booking.stop()


if __name__ == "__main__":
    main()
