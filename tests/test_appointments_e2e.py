"""The appointment desk in examples/automations/appointments, run as an owner would: through
`agentd run`, against the example's fake booking system, its URL in agentd.env (read through
the one secret reader). Each branch of the three flows the design names; events checked at the
door (a ZIP that is not five digits, a choice not offered); reschedule and cancel only for a
caller verified in the same call; a supervisor's approval before a ticket; the call webhook
starting a verification, carrying the ZIP and answering where a request is; a kill -9 between
every pair of steps with each change applied once; an answer signalled while the daemon is
down."""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agentd.durable import store
from tests.daemon_process import OWNER, REPO_ROOT, Daemon, daemon_env, poll
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.anthropic import Reply, tool_use_block

DESK = REPO_ROOT / "examples" / "automations" / "appointments"
SECRET = "calls-hook-secret-7"
SUPERVISORS = -4242  # the group that takes escalations ([automations.chats] supervisors)
PHONE_ONE = "+15550001111"  # cust_001: ZIP 94107, one appointment, one free slot
CALLERS = {  # customer: (phone, ZIP), as the fake booking system has them
    "cust_001": (PHONE_ONE, "94107"),
    "cust_002": ("+15550002222", "10001"),
    "cust_003": ("+15550003333", "60601"),
    "cust_004": ("+15550004444", "30301"),
}
RESTARTS = pytest.mark.timeout(900)  # each restart of `agentd run` takes seconds on a busy box


def _load_fake() -> ModuleType:
    spec = importlib.util.spec_from_file_location("appointments_fake", DESK / "fake/booking.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fake = _load_fake()


class Desk:
    """The daemon, its fakes, and the calls a phone system (or an agent) would make."""

    def __init__(
        self, daemon: Daemon, tg: FakeTelegram, booking: Any, llm: FakeAnthropic | None = None
    ) -> None:
        self.daemon, self.tg, self.booking, self.llm = daemon, tg, booking, llm

    def start(self, name: str, inp: dict[str, Any]) -> str:
        """Start a flow; reschedule and cancel for a caller verified first in the same call
        (unless the test names the verification)."""
        inp = {"callSessionId": "call_1", **inp}
        if name != "verify_caller" and "verificationId" not in inp:
            inp["verificationId"] = self.verify(inp["customerId"], inp["callSessionId"])
        started = self.daemon.cli_json("workflows", "start", name, "--input", json.dumps(inp))
        return str(started["instance_id"])

    def verify(self, customer: str, call: str) -> str:
        """A verify_caller run that verified `customer` in `call`: its instance id."""
        phone, zip_code = CALLERS[customer]
        iid = self.start("verify_caller", {"callSessionId": call, "phoneE164": phone})
        self.signal(iid, "verify_zip", {"zip": zip_code})
        assert self.output(iid)["status"] == "verified"
        return iid

    def signal(self, iid: str, event: str, data: dict[str, Any]) -> None:
        done = self.daemon.cli("workflows", "signal", iid, event, "--data", json.dumps(data))
        assert done.returncode == 0, done.stderr

    def refused(self, iid: str, event: str, data: dict[str, Any]) -> str:
        """Signal an event the door must refuse; its error (the CLI exits 1)."""
        done = self.daemon.cli("workflows", "signal", iid, event, "--data", json.dumps(data))
        assert done.returncode == 1, done.stdout + done.stderr
        return " ".join(done.stderr.split())

    def events_of(self, iid: str) -> list[str]:
        rows = self.daemon.query("SELECT type FROM workflow_events WHERE instance_id = ?", (iid,))
        return [r[0] for r in rows]

    def output(self, iid: str) -> dict[str, Any]:
        done = self.daemon.cli("workflows", "wait", iid, "--timeout", "90")
        result = json.loads(done.stdout or "{}")
        assert done.returncode == 0, f"{result}\n{done.stderr}"
        return dict(result["output"])

    def steps(self, iid: str) -> dict[str, str]:
        rows = self.daemon.query(
            "SELECT name, status FROM workflow_steps WHERE instance_id = ?", (iid,)
        )
        return {r[0]: r[1] for r in rows}

    def waiting_at(self, iid: str, step: str) -> None:
        """Block until the instance is suspended in the wait step `step`."""

        def there() -> bool:
            row = self.daemon.query("SELECT status FROM workflow_instances WHERE id = ?", (iid,))
            return row[0][0] == "waiting" and step in self.steps(iid)

        poll(there, 60, f"{iid} waiting at {step}")

    def hook_base(self) -> str:
        line = next(x for x in self.daemon.log().splitlines() if "hooks listening" in x)
        where = re.search(r"127\.0\.0\.1:\d+", line)
        assert where, line
        return f"http://{where[0]}"

    def post_hook(self, path: str, body: dict[str, Any], delivery: str) -> dict[str, Any]:
        status, answer = self.post_raw(path, body, delivery)
        assert status in (200, 202), answer
        return answer

    def post_raw(
        self, path: str, body: dict[str, Any], delivery: str = "", secret: str = SECRET
    ) -> tuple[int, dict[str, Any]]:
        """A signed POST as the phone system sends it: its status and JSON answer."""
        raw = json.dumps(body).encode()
        sig = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
        headers = {"Content-Type": "application/json", "X-Signature-256": sig}
        if delivery:
            headers["Idempotency-Key"] = delivery
        request = urllib.request.Request(
            self.hook_base() + path, data=raw, method="POST", headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            return exc.code, dict(json.loads(exc.read()))

    def escalations_told(self) -> list[str]:
        return [
            m["plain_text"]
            for m in self.tg.sent
            if m["chat_id"] == SUPERVISORS and m["plain_text"].startswith("☎️ Escalated")
        ]

    def kill_and_restart(self) -> None:
        self.daemon.kill9()
        self.daemon.start()

    def kill_at(self, held: Any, then: tuple[str, str] | None = None) -> Any:
        """Kill -9 while a held request is in flight, then restart: the step before it is
        journaled, this one is not (or, held after its change, its answer is not). `then`
        (route, "before" | "after") holds the next request, before the restart can send it."""
        self.booking.wait(lambda: held.arrived, 60, f"a {held.route} request")
        self.daemon.kill9()
        self.booking.wait(lambda: held.dropped, 30, f"the {held.route} request dropped")
        following = self.booking.hold(*then) if then else None
        self.daemon.start()
        return following


@pytest.fixture
def fakes() -> Iterator[tuple[FakeTelegram, FakeAnthropic, Any]]:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm, fake.FakeBooking() as bk:
        tg.add_chat(OWNER)
        tg.add_chat(SUPERVISORS, "group", OWNER)
        yield tg, llm, bk


def desk_env(tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, booking: Any) -> dict[str, str]:
    """The README's set-up: the settings' names in [automations] secrets, their values (and
    the hook's secret) in agentd.env beside the config, not in the daemon's environment (as
    with `agentd run` in a terminal)."""
    (tmp / "agentd.toml").write_text(
        f'[automations]\nfolder = "{DESK}"\n'
        'secrets = ["APPOINTMENTS_BOOKING_URL", "APPOINTMENTS_BOOKING_TOKEN"]\n\n'
        f"[automations.chats]\nsupervisors = {SUPERVISORS}\n\n"
        '[automations.hooks]\nenabled = true\nlisten = "127.0.0.1:0"\n\n'
        '[automations.hooks.routes.calls]\nworkflow = "verify_caller"\n'
        'secret_env = "CALLS_HOOK_SECRET"\n\n'
        '[automations.hooks.routes.reschedule]\nworkflow = "reschedule_appointment"\n'
        'secret_env = "CALLS_HOOK_SECRET"\n'
    )
    stored = tmp / "agentd.env"
    stored.write_text(f"CALLS_HOOK_SECRET={SECRET}\nAPPOINTMENTS_BOOKING_URL={booking.url}\n")
    stored.chmod(0o600)
    env = daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp / "agentd.toml"))
    assert "APPOINTMENTS_BOOKING_URL" not in env and "CALLS_HOOK_SECRET" not in env
    return env


@pytest.fixture(scope="module")
def shared_desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    """One daemon for the module's tests (a start takes seconds): see `desk`."""
    tmp = tmp_path_factory.mktemp("desk")
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm, fake.FakeBooking() as bk:
        tg.add_chat(OWNER)
        tg.add_chat(SUPERVISORS, "group", OWNER)
        daemon = Daemon(tmp, desk_env(tmp, tg, llm, bk)).start()
        try:
            yield Desk(daemon, tg, bk, llm)
        finally:
            daemon.stop()


@pytest.fixture
def desk(shared_desk: Desk) -> Iterator[Desk]:
    """The shared daemon with a booking system as new, so no test sees another's effects, in
    any order; each leaves no flow of its own still open to call it during the next."""
    shared_desk.booking.reset()
    yield shared_desk
    flows = ("verify_caller", "reschedule_appointment", "cancel_appointment")
    marks = ",".join("?" * len(flows))
    left = shared_desk.daemon.query(
        f"SELECT id, status FROM workflow_instances WHERE workflow IN ({marks}) "
        f"AND status IN {store.OPEN_STATUSES!r}",
        flows,
    )
    assert not left, f"flows left open: {[tuple(r) for r in left]}"


# -- verify_caller ----------------------------------------------------------------------------


def test_all_three_load(desk: Desk) -> None:
    listed = desk.daemon.cli_json("workflows", "automations")
    names = {a["name"] for a in listed["automations"]}
    assert {"verify_caller", "reschedule_appointment", "cancel_appointment"} <= names
    assert listed["problems"] == []


def test_a_call_webhook_starts_verification_and_the_zip_verifies_first_try(desk: Desk) -> None:
    call = {"callSessionId": "call_hook", "phoneE164": PHONE_ONE, "intent": "verify"}
    started = desk.post_hook("/hooks/calls", call, "call-hook-1")
    again = desk.post_hook("/hooks/calls", call, "call-hook-1")  # the phone system retries
    iid = started["instance_id"]
    assert started["created"] is True and again == {"instance_id": iid, "created": False}
    desk.waiting_at(iid, "wait:verify_zip#1")
    desk.post_hook(
        "/hooks/calls/events/verify_zip",
        {"instance_id": iid, "data": {"zip": "94107"}},
        "call-hook-1-zip",
    )
    assert desk.output(iid) == {
        "status": "verified",
        "customerId": "cust_001",
        "message": "The caller is verified.",
    }


def test_verified_on_the_second_attempt(desk: Desk) -> None:
    iid = desk.start("verify_caller", {"phoneE164": PHONE_ONE})
    desk.waiting_at(iid, "wait:verify_zip#1")
    desk.signal(iid, "verify_zip", {"zip": "11111"})
    desk.waiting_at(iid, "wait:verify_zip#2")
    desk.signal(iid, "verify_zip", {"zip": "94107"})
    out = desk.output(iid)
    assert out["status"] == "verified" and out["customerId"] == "cust_001"
    assert list(desk.steps(iid)) == [
        "lookup",
        "wait:verify_zip#1",
        "verify#1",
        "wait:verify_zip#2",
        "verify#2",
    ]


def test_two_failed_attempts_escalate_to_the_owner(desk: Desk) -> None:
    before = desk.booking.effect_count("escalate")
    iid = desk.start("verify_caller", {"callSessionId": "call_bad", "phoneE164": PHONE_ONE})
    desk.signal(iid, "verify_zip", {"zip": "00000"})
    desk.signal(iid, "verify_zip", {"zip": "99999"})
    out = desk.output(iid)
    assert out["status"] == "escalated" and out["customerId"] == "cust_001"
    assert "after 2 attempts" in out["message"]
    assert desk.booking.effect_count("escalate") == before + 1
    told = [t for t in desk.escalations_told() if "call_bad" in t]
    assert len(told) == 1 and "failed ZIP verification 2 times" in told[0]


def test_no_zip_in_time_needs_followup(desk: Desk) -> None:
    iid = desk.start("verify_caller", {"phoneE164": PHONE_ONE, "waitSeconds": 1})
    assert desk.output(iid) == {
        "status": "needs_followup",
        "customerId": "cust_001",
        "message": "The caller gave no ZIP code in time; call them back to verify.",
    }


def test_an_unknown_number_needs_followup(desk: Desk) -> None:
    out = desk.output(desk.start("verify_caller", {"phoneE164": "+15559990000"}))
    assert out["status"] == "needs_followup" and out["customerId"] is None


def test_input_is_validated_by_field(desk: Desk) -> None:
    bad = desk.daemon.cli(
        "workflows", "start", "verify_caller", "--input", '{"callSessionId": "c", "phoneE164": "5"}'
    )
    assert bad.returncode == 1 and "phoneE164" in bad.stderr


@pytest.mark.parametrize("typo", ["abcde", "1234", "941070"])
def test_a_zip_that_is_not_five_digits_is_refused_at_the_door(desk: Desk, typo: str) -> None:
    """Refused by the CLI (exit 1) and the webhook (422), each naming the field; nothing is
    delivered, so the typo is no attempt and the caller still verifies on their first."""
    iid = desk.start(
        "verify_caller", {"callSessionId": f"call_typo_{typo}", "phoneE164": PHONE_ONE}
    )
    desk.waiting_at(iid, "wait:verify_zip#1")
    assert "zip" in desk.refused(iid, "verify_zip", {"zip": typo})
    status, answer = desk.post_raw(
        "/hooks/calls/events/verify_zip", {"instance_id": iid, "data": {"zip": typo}}, typo
    )
    assert status == 422 and "zip" in answer["error"], answer
    assert desk.events_of(iid) == []
    desk.signal(iid, "verify_zip", {"zip": "94107"})
    assert desk.output(iid)["status"] == "verified"
    assert "wait:verify_zip#2" not in desk.steps(iid)


def test_an_event_the_flow_does_not_take_is_refused(desk: Desk) -> None:
    iid = desk.start("verify_caller", {"callSessionId": "call_odd", "phoneE164": PHONE_ONE})
    error = desk.refused(iid, "select_slot", {"slotId": "slot_101"})
    assert "verify_zip" in error and "approve_escalation" in error
    desk.signal(iid, "verify_zip", {"zip": "94107"})
    assert desk.output(iid)["status"] == "verified"


def test_the_status_endpoint_answers_where_a_request_is(desk: Desk) -> None:
    call = {"callSessionId": "call_status", "phoneE164": PHONE_ONE}
    iid = desk.post_hook("/hooks/calls", call, "call-status")["instance_id"]
    desk.waiting_at(iid, "wait:verify_zip#1")
    status, state = desk.post_raw("/hooks/calls/status", {"instance_id": iid})
    assert status == 200 and state["status"] == "waiting", state
    assert state["waiting_for"] == "verify_zip" and state["output"] is None
    again = desk.post_raw("/hooks/calls/status", {"instance_id": iid})
    assert again == (200, state)  # a read: the same signed body answers again
    assert desk.post_raw("/hooks/calls/status", {"instance_id": iid}, secret="wrong")[0] == 401
    other = desk.start("reschedule_appointment", {"customerId": "cust_001"})
    assert desk.post_raw("/hooks/calls/status", {"instance_id": other})[0] == 404
    desk.signal(iid, "verify_zip", {"zip": "94107"})
    desk.output(iid)
    status, state = desk.post_raw("/hooks/calls/status", {"instance_id": iid})
    assert (status, state["status"], state["output"]["status"]) == (200, "complete", "verified")
    desk.signal(other, "confirm_reschedule", {"confirm": False})
    desk.output(other)


def test_a_supervisor_approves_the_ticket_before_it_is_opened(desk: Desk) -> None:
    before = desk.booking.effect_count("escalate")
    inp = {"callSessionId": "call_approve", "phoneE164": PHONE_ONE, "approveTickets": True}
    iid = desk.start("verify_caller", inp)
    desk.signal(iid, "verify_zip", {"zip": "00000"})
    desk.signal(iid, "verify_zip", {"zip": "11111"})
    desk.waiting_at(iid, "wait:approve_escalation")
    asked = [m["plain_text"] for m in desk.tg.sent if m["chat_id"] == SUPERVISORS]
    assert any("Approve an escalation ticket" in t and iid in t for t in asked), asked
    assert desk.booking.effect_count("escalate") == before  # nothing opened yet
    assert "by" in desk.refused(iid, "approve_escalation", {"approve": True})
    desk.signal(iid, "approve_escalation", {"approve": True, "by": "dana"})
    out = desk.output(iid)
    assert out["status"] == "escalated" and desk.booking.effect_count("escalate") == before + 1
    told = [t for t in desk.escalations_told() if "call_approve" in t]
    assert len(told) == 1 and "Approved by dana" in told[0]


def test_a_ticket_no_supervisor_approves_is_not_opened(desk: Desk) -> None:
    before = desk.booking.effect_count("escalate")
    inp = {"callSessionId": "call_deny", "phoneE164": PHONE_ONE, "approveTickets": True}
    iid = desk.start("verify_caller", inp)
    desk.signal(iid, "verify_zip", {"zip": "00000"})
    desk.signal(iid, "verify_zip", {"zip": "11111"})
    desk.signal(iid, "approve_escalation", {"approve": False, "by": "dana"})
    out = desk.output(iid)
    assert out["status"] == "needs_followup" and "no ticket was approved" in out["message"]
    assert desk.booking.effect_count("escalate") == before


def test_the_owners_agent_works_the_flows_through_its_tools(desk: Desk) -> None:
    """The model starts a verification, passes the caller's ZIP (a typo refused at the door,
    as from anywhere), and after reading the flow's state (outside content) its next event
    asks the owner first, as every egress after outside content does."""
    assert desk.llm is not None
    started: dict[str, str] = {}

    def event(zip_code: str, use_id: str) -> Reply:
        data = {"instance_id": started["iid"], "event": "verify_zip", "data": {"zip": zip_code}}
        return Reply(content=[tool_use_block("automation_event", data, use_id)])

    def responder(body: dict[str, Any]) -> Any:
        said = json.dumps(body["messages"][-1])
        if "tool_result" in said:
            if "toolu_desk_status" in said:  # read the state, now send the ZIP: asks first
                return event("94107", "toolu_desk_zip")
            return "Done."
        if "desk-start" in said:
            tools = {t["name"] for t in body.get("tools", [])}
            assert {"run_verify_caller", "automation_event", "automation_status"} <= tools
            inp = {"callSessionId": "call_model", "phoneE164": PHONE_ONE}
            return Reply(content=[tool_use_block("run_verify_caller", inp, "toolu_desk_run")])
        if "desk-typo" in said:
            return event("9410", "toolu_desk_typo")
        if "desk-status" in said:
            args = {"instance_id": started["iid"]}
            return Reply(content=[tool_use_block("automation_status", args, "toolu_desk_status")])
        return None

    desk.llm.set_responder(responder)
    try:
        desk.tg.add_message(OWNER, OWNER, "desk-start: a caller on +15550001111")
        rows = poll(
            lambda: desk.daemon.query(
                "SELECT instance_id FROM automation_runs WHERE source = 'tool'"
            ),
            60,
            "the verification the model started",
        )
        started["iid"] = rows[0][0]
        desk.waiting_at(started["iid"], "wait:verify_zip#1")
        desk.tg.add_message(OWNER, OWNER, "desk-typo: they say 9410")
        refused = poll(
            lambda: [
                r
                for r in desk.llm.requests
                if "toolu_desk_typo" in json.dumps(r["body"].get("messages", [])[-1:])
            ],
            60,
            "the refused event's tool result",
        )
        result = json.dumps(refused[0]["body"]["messages"][-1])
        assert "Refused, nothing was sent" in result and "zip" in result
        assert desk.events_of(started["iid"]) == []
        desk.tg.add_message(OWNER, OWNER, "desk-status: where is it? then send 94107")
        card = desk.tg.wait_until(
            lambda: next(
                (
                    m
                    for m in desk.tg.sent
                    if m["chat_id"] == OWNER and "Approval needed" in m["plain_text"]
                ),
                None,
            ),
            60,
            "the approval card for the event",
        )
        assert "automation_event" in card["plain_text"] and "verify_zip" in card["plain_text"]
        assert desk.events_of(started["iid"]) == []  # not sent before the owner says so
        approve = card["reply_markup"]["inline_keyboard"][0][0]
        desk.tg.add_callback_query(OWNER, OWNER, card["message_id"], approve["callback_data"])
        assert desk.output(started["iid"])["status"] == "verified"
    finally:
        desk.llm.set_responder(None)


# -- reschedule_appointment -------------------------------------------------------------------


def test_one_appointment_and_one_slot_are_chosen_for_the_caller(desk: Desk) -> None:
    iid = desk.start("reschedule_appointment", {"customerId": "cust_001"})
    desk.waiting_at(iid, "wait:confirm_reschedule")
    desk.signal(iid, "confirm_reschedule", {"confirm": True})
    assert desk.output(iid) == {
        "status": "rescheduled",
        "appointmentId": "appt_001",
        "slotId": "slot_101",
        "message": "Moved to 2026-12-04T09:00.",
    }
    assert "wait:select_appointment" not in desk.steps(iid)
    assert "wait:select_slot" not in desk.steps(iid)


def test_the_caller_chooses_among_several(desk: Desk) -> None:
    iid = desk.start("reschedule_appointment", {"customerId": "cust_002"})
    desk.waiting_at(iid, "wait:select_appointment")
    desk.signal(iid, "select_appointment", {"appointmentId": "appt_002"})
    desk.waiting_at(iid, "wait:select_slot")
    desk.signal(iid, "select_slot", {"slotId": "slot_202"})
    desk.waiting_at(iid, "wait:confirm_reschedule")
    desk.signal(iid, "confirm_reschedule", {"confirm": True})
    out = desk.output(iid)
    assert (out["status"], out["appointmentId"], out["slotId"]) == (
        "rescheduled",
        "appt_002",
        "slot_202",
    )
    assert desk.booking.effects == [("reschedule", "appt_002", "slot_202")]


def test_no_free_slot_needs_followup(desk: Desk) -> None:
    out = desk.output(desk.start("reschedule_appointment", {"customerId": "cust_003"}))
    assert out == {
        "status": "needs_followup",
        "appointmentId": "appt_004",
        "slotId": None,
        "message": "No free slot for appt_004; offer a call back.",
    }


@pytest.mark.parametrize("flow", ["reschedule_appointment", "cancel_appointment"])
def test_a_customer_with_no_appointment_needs_followup(desk: Desk, flow: str) -> None:
    out = desk.output(desk.start(flow, {"customerId": "cust_004"}))
    assert out["status"] == "needs_followup" and out["appointmentId"] is None
    assert "no upcoming appointment" in out["message"]


def test_a_reschedule_with_no_choice_or_no_confirmation_in_time_needs_followup(
    desk: Desk,
) -> None:
    moved = desk.booking.effect_count("reschedule")
    unchosen = desk.output(
        desk.start("reschedule_appointment", {"customerId": "cust_002", "waitSeconds": 1})
    )
    assert unchosen["status"] == "needs_followup" and unchosen["appointmentId"] is None
    assert "No appointment was chosen" in unchosen["message"]
    silent = desk.output(
        desk.start("reschedule_appointment", {"customerId": "cust_001", "waitSeconds": 1})
    )
    assert silent == {
        "status": "needs_followup",
        "appointmentId": "appt_001",
        "slotId": "slot_101",
        "message": "The caller did not confirm in time; nothing was changed.",
    }
    assert desk.booking.effect_count("reschedule") == moved


def test_the_caller_keeps_the_time_and_nothing_changes(desk: Desk) -> None:
    moved = desk.booking.effect_count("reschedule")
    iid = desk.start("reschedule_appointment", {"customerId": "cust_001"})
    desk.signal(iid, "confirm_reschedule", {"confirm": False})
    out = desk.output(iid)
    assert out["status"] == "cancelled" and out["slotId"] == "slot_101"
    assert desk.booking.effect_count("reschedule") == moved


def test_a_choice_not_offered_is_refused_and_the_caller_chooses_again(desk: Desk) -> None:
    iid = desk.start("reschedule_appointment", {"customerId": "cust_002"})
    desk.waiting_at(iid, "wait:select_appointment")
    error = desk.refused(iid, "select_appointment", {"appointmentId": "appt_001"})
    assert "appt_001" in error and "not offered" in error and "appt_002, appt_003" in error
    assert desk.events_of(iid) == []
    desk.signal(iid, "select_appointment", {"appointmentId": "appt_003"})
    desk.waiting_at(iid, "wait:confirm_reschedule")  # appt_003 has one slot: chosen for them
    desk.signal(iid, "confirm_reschedule", {"confirm": False})
    assert desk.output(iid)["appointmentId"] == "appt_003"


@pytest.mark.parametrize("flow", ["reschedule_appointment", "cancel_appointment"])
def test_only_a_caller_verified_in_this_call_changes_an_appointment(desk: Desk, flow: str) -> None:
    """Verified as another customer, in another call, or not at all: needs_followup, and the
    booking system is not even asked for the appointments."""
    elsewhere = desk.verify("cust_001", "call_other")
    failed = desk.start("verify_caller", {"callSessionId": "call_v", "phoneE164": PHONE_ONE})
    desk.signal(failed, "verify_zip", {"zip": "00000"})
    desk.signal(failed, "verify_zip", {"zip": "00000"})
    assert desk.output(failed)["status"] == "escalated"
    cases = {
        elsewhere: ("call_v", "cust_001", "another call"),
        failed: ("call_v", "cust_001", "not verified as cust_001"),
        desk.verify("cust_002", "call_v"): ("call_v", "cust_001", "not verified as cust_001"),
        "no-such-instance": ("call_v", "cust_001", "not a finished verify_caller run"),
    }
    for verification, (call, customer, why) in cases.items():
        inp = {"callSessionId": call, "customerId": customer, "verificationId": verification}
        iid = desk.start(flow, inp)
        out = desk.output(iid)
        assert out["status"] == "needs_followup" and why in out["message"], out
        assert "appointments" not in desk.steps(iid)


# -- cancel_appointment -----------------------------------------------------------------------


def test_a_confirmed_cancellation_is_applied(desk: Desk) -> None:
    iid = desk.start("cancel_appointment", {"customerId": "cust_002"})
    desk.waiting_at(iid, "wait:cancel_select_appointment")
    desk.signal(iid, "cancel_select_appointment", {"appointmentId": "appt_003"})
    desk.waiting_at(iid, "wait:cancel_confirm")
    desk.signal(iid, "cancel_confirm", {"confirm": True})
    assert desk.output(iid) == {
        "status": "cancelled",
        "appointmentId": "appt_003",
        "message": "Cancelled.",
    }
    assert desk.booking.effects == [("cancel", "appt_003")]


def test_a_refused_cancellation_is_escalated(desk: Desk) -> None:
    desk.booking.cancel_fails = True
    try:
        iid = desk.start(
            "cancel_appointment", {"callSessionId": "call_locked", "customerId": "cust_001"}
        )
        desk.signal(iid, "cancel_confirm", {"confirm": True})
        out = desk.output(iid)
    finally:
        desk.booking.cancel_fails = False
    assert out["status"] == "escalated" and out["appointmentId"] == "appt_001"
    told = [t for t in desk.escalations_told() if "call_locked" in t]
    assert len(told) == 1 and "locked" in told[0] and "cust_001" in told[0]


def test_a_booking_system_down_through_every_retry_is_escalated_not_an_error(desk: Desk) -> None:
    """The cancellation retries its 503s and then a person finishes it; with the CRM down too,
    the owner is still told, without a ticket."""
    desk.booking.down = {"cancel", "escalate"}
    try:
        iid = desk.start(
            "cancel_appointment", {"callSessionId": "call_outage", "customerId": "cust_001"}
        )
        desk.signal(iid, "cancel_confirm", {"confirm": True})
        out = desk.output(iid)
    finally:
        desk.booking.down = set()
    assert out["status"] == "escalated" and "could not be reached" in out["message"]
    assert desk.booking.effects.count(("down", "cancel")) == 4  # HTTP_RETRY: 4 attempts
    assert ("cancel", "appt_001") not in desk.booking.effects
    told = [t for t in desk.escalations_told() if "call_outage" in t]
    assert len(told) == 1 and "ticket none" in told[0] and "No ticket could be opened" in told[0]


def test_a_cancellation_the_caller_does_not_confirm_needs_followup(desk: Desk) -> None:
    cancelled = desk.booking.effect_count("cancel")
    said_no = desk.start("cancel_appointment", {"customerId": "cust_001"})
    desk.signal(said_no, "cancel_confirm", {"confirm": False})
    silent = desk.start("cancel_appointment", {"customerId": "cust_001", "waitSeconds": 1})
    for iid in (said_no, silent):
        assert desk.output(iid) == {
            "status": "needs_followup",
            "appointmentId": "appt_001",
            "message": "The caller did not confirm the cancellation; nothing was changed.",
        }
    assert desk.booking.effect_count("cancel") == cancelled


def test_a_cancellation_with_no_choice_in_time_needs_followup(desk: Desk) -> None:
    iid = desk.start("cancel_appointment", {"customerId": "cust_002", "waitSeconds": 1})
    out = desk.output(iid)
    assert out["status"] == "needs_followup" and out["appointmentId"] is None
    assert "No appointment was chosen" in out["message"]


def test_a_refused_cancellation_waits_for_the_supervisor_before_a_ticket(desk: Desk) -> None:
    desk.booking.cancel_fails = True
    before = desk.booking.effect_count("escalate")
    try:
        inp = {"callSessionId": "call_c_ok", "customerId": "cust_001", "approveTickets": True}
        iid = desk.start("cancel_appointment", inp)
        desk.signal(iid, "cancel_confirm", {"confirm": True})
        desk.waiting_at(iid, "wait:approve_escalation")
        assert desk.booking.effect_count("escalate") == before
        desk.signal(iid, "approve_escalation", {"approve": True, "by": "sam"})
        out = desk.output(iid)
    finally:
        desk.booking.cancel_fails = False
    assert out["status"] == "escalated" and desk.booking.effect_count("escalate") == before + 1


# -- kill -9 between every pair of steps -------------------------------------------------------


@RESTARTS
def test_verification_survives_a_kill_between_every_pair_of_steps(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, Any]
) -> None:
    tg, llm, booking = fakes
    daemon = Daemon(tmp_path, desk_env(tmp_path, tg, llm, booking))
    desk = Desk(daemon, tg, booking)
    held = booking.hold("lookup")  # in flight when the first kill comes
    daemon.start()
    try:
        iid = desk.start("verify_caller", {"callSessionId": "call_k9", "phoneE164": PHONE_ONE})
        booking.wait(lambda: held.arrived, 60, "the lookup")
        daemon.kill9()
        booking.wait(lambda: held.dropped, 30, "the lookup dropped")
        daemon.start()
        # lookup | wait#1: the ZIP is signalled while the daemon is down.
        desk.waiting_at(iid, "wait:verify_zip#1")
        daemon.kill9()
        desk.signal(iid, "verify_zip", {"zip": "00000"})
        verify_1 = booking.hold("verify")
        daemon.start()
        # wait#1 | verify#1, and verify#1 | wait#2.
        booking.wait(lambda: verify_1.arrived, 60, "verify#1")
        daemon.kill9()
        booking.wait(lambda: verify_1.dropped, 30, "verify#1 dropped")
        daemon.start()
        desk.waiting_at(iid, "wait:verify_zip#2")
        desk.kill_and_restart()
        verify_2 = booking.hold("verify")
        desk.signal(iid, "verify_zip", {"zip": "11111"})
        # wait#2 | verify#2, verify#2 | escalate, and escalate | notify (its change made, its
        # answer not yet journaled: the repeat carries the same idempotency key).
        escalating = desk.kill_at(verify_2, then=("escalate", "before"))
        answering = desk.kill_at(escalating, then=("escalate", "after"))
        desk.kill_at(answering)
        out = desk.output(iid)
        assert out["status"] == "escalated" and out["customerId"] == "cust_001"
        assert booking.calls["lookup"] == 2  # one dropped by a kill, one answered
        assert booking.calls["verify"] == 4 and booking.calls["escalate"] == 3
        assert booking.effect_count("escalate") == 1
        poll(lambda: desk.escalations_told(), 30, "the owner told")
        assert len(desk.escalations_told()) == 1
        assert daemon.starts == 8
    finally:
        daemon.stop()


@RESTARTS
def test_reschedule_survives_a_kill_between_every_pair_of_steps(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, Any]
) -> None:
    tg, llm, booking = fakes
    daemon = Daemon(tmp_path, desk_env(tmp_path, tg, llm, booking)).start()
    desk = Desk(daemon, tg, booking)
    try:
        listing = booking.hold("appointments")
        iid = desk.start("reschedule_appointment", {"customerId": "cust_002"})
        desk.kill_at(listing)
        desk.waiting_at(iid, "wait:select_appointment")
        desk.daemon.kill9()
        desk.signal(iid, "select_appointment", {"appointmentId": "appt_002"})  # while down
        fetching = booking.hold("slots")
        desk.daemon.start()
        desk.kill_at(fetching)
        desk.waiting_at(iid, "wait:select_slot")
        desk.kill_and_restart()
        desk.signal(iid, "select_slot", {"slotId": "slot_201"})
        desk.waiting_at(iid, "wait:confirm_reschedule")
        desk.kill_and_restart()
        applying = booking.hold("reschedule")
        desk.signal(iid, "confirm_reschedule", {"confirm": True})
        desk.kill_at(desk.kill_at(applying, then=("reschedule", "after")))
        out = desk.output(iid)
        assert (out["status"], out["appointmentId"], out["slotId"]) == (
            "rescheduled",
            "appt_002",
            "slot_201",
        )
        assert booking.effects == [("reschedule", "appt_002", "slot_201")]
        assert booking.calls["reschedule"] == 3
    finally:
        daemon.stop()


@RESTARTS
def test_a_refused_cancellation_survives_a_kill_between_every_pair_of_steps(
    tmp_path: Path, fakes: tuple[FakeTelegram, FakeAnthropic, Any]
) -> None:
    tg, llm, booking = fakes
    booking.cancel_fails = True
    daemon = Daemon(tmp_path, desk_env(tmp_path, tg, llm, booking)).start()
    desk = Desk(daemon, tg, booking)
    try:
        listing = booking.hold("appointments")
        iid = desk.start("cancel_appointment", {"callSessionId": "c9", "customerId": "cust_001"})
        desk.kill_at(listing)
        desk.waiting_at(iid, "wait:cancel_confirm")
        desk.kill_and_restart()
        cancelling = booking.hold("cancel")
        desk.signal(iid, "cancel_confirm", {"confirm": True})
        refused = desk.kill_at(cancelling, then=("cancel", "after"))
        escalating = desk.kill_at(refused, then=("escalate", "before"))
        answering = desk.kill_at(escalating, then=("escalate", "after"))
        desk.kill_at(answering)
        out = desk.output(iid)
        assert out["status"] == "escalated" and out["appointmentId"] == "appt_001"
        refused, escalated = ("cancel_refused", "appt_001"), ("escalate", "esc_1", "cancellation")
        assert booking.effects == [refused, escalated]
        poll(lambda: desk.escalations_told(), 30, "the owner told")
        assert len(desk.escalations_told()) == 1
    finally:
        daemon.stop()
