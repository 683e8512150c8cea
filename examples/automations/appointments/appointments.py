"""A customer-service desk for appointments, as three automations: verify a caller, reschedule
an appointment, cancel one. Each talks to the booking system over HTTP (JSON), one journaled
step per call, so a restart never repeats a finished call and the changes (reschedule, cancel,
escalation) carry an idempotency key the booking system deduplicates on.

The caller's answers (a ZIP code, a choice, a confirmation) arrive as events: from the phone
system through the webhook (`POST /hooks/calls/events/verify_zip`) or from the shell
(`agentd workflows signal ID verify_zip --data '{"zip": "94107"}'`). See README.md here.

Each event's data is checked against its model (`EVENTS`) before agentd accepts it, and a
choice that was not offered is refused there too: a ZIP that is not five digits never counts as
an attempt. Reschedule and cancel act only for a caller verified in the same call (their input
names the `verify_caller` instance that verified them).

Settings come through agentd's one secret reader (the environment, then agentd.env beside the
config, then a systemd credential), named in `[automations] secrets`: `APPOINTMENTS_BOOKING_URL`
(required), `APPOINTMENTS_BOOKING_TOKEN` (optional bearer token). They are read on each run
and never journaled: a value fixed (and agentd restarted, for agentd.env) takes effect on
`agentd workflows retry ID`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from agentd.automations import AsTool, AutoStep, NonRetryable, Retry, StepFailed, workflow

WAIT_SECONDS = 15 * 60  # how long a caller's answer may take before a person follows up
MAX_ZIP_ATTEMPTS = 2
HTTP_RETRY = Retry(limit=4, delay=0.5, max_delay=10.0)
HTTP_TIMEOUT = 15.0
ZIP = re.compile(r"\d{5}")
URL_SETTING = "APPOINTMENTS_BOOKING_URL"
TOKEN_SETTING = "APPOINTMENTS_BOOKING_TOKEN"


class Schema(BaseModel):
    """The seed's camelCase on the wire (`callSessionId`), snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True
    )


# -- inputs and outputs -----------------------------------------------------------------------


class VerifyInput(Schema):
    call_session_id: str = Field(min_length=1, max_length=200)
    phone_e164: str = Field(pattern=r"^\+[1-9]\d{6,14}$")
    intent: Literal["verify"] = "verify"
    wait_seconds: int = Field(default=WAIT_SECONDS, ge=1, le=86400)
    # A supervisor approves each escalation ticket before it is opened (`approve_escalation`).
    approve_tickets: bool = False


class VerifyOutput(Schema):
    status: Literal["verified", "escalated", "needs_followup"]
    customer_id: str | None
    message: str


class RescheduleInput(Schema):
    call_session_id: str = Field(min_length=1, max_length=200)
    customer_id: str = Field(min_length=1, max_length=200)
    verification_id: str = Field(min_length=1, max_length=200)  # the verify_caller instance
    intent: Literal["reschedule"] = "reschedule"
    message: str = Field(default="", max_length=4000)
    context_summary: str | None = Field(default=None, max_length=4000)
    wait_seconds: int = Field(default=WAIT_SECONDS, ge=1, le=86400)


class RescheduleOutput(Schema):
    status: Literal["rescheduled", "cancelled", "needs_followup"]
    appointment_id: str | None
    slot_id: str | None
    message: str


class CancelInput(Schema):
    call_session_id: str = Field(min_length=1, max_length=200)
    customer_id: str = Field(min_length=1, max_length=200)
    verification_id: str = Field(min_length=1, max_length=200)  # the verify_caller instance
    intent: Literal["cancel"] = "cancel"
    message: str = Field(default="", max_length=4000)
    wait_seconds: int = Field(default=WAIT_SECONDS, ge=1, le=86400)
    approve_tickets: bool = False


class CancelOutput(Schema):
    status: Literal["cancelled", "needs_followup", "escalated"]
    appointment_id: str | None
    message: str


# -- the events the flows wait for (checked before agentd accepts them) ----------------------


class ZipEvent(Schema):
    zip: str = Field(pattern=r"^\d{5}$", description="the caller's 5-digit ZIP code")


class AppointmentChoice(Schema):
    appointment_id: str = Field(min_length=1, max_length=200)


class SlotChoice(Schema):
    slot_id: str = Field(min_length=1, max_length=200)


class Confirmation(Schema):
    confirm: bool


class Approval(Schema):
    approve: bool
    by: str = Field(min_length=1, max_length=200)  # the supervisor, for the ticket and the log


VERIFY_EVENTS = {"verify_zip": ZipEvent, "approve_escalation": Approval}
RESCHEDULE_EVENTS = {
    "select_appointment": AppointmentChoice,
    "select_slot": SlotChoice,
    "confirm_reschedule": Confirmation,
}
CANCEL_EVENTS = {
    "cancel_select_appointment": AppointmentChoice,
    "cancel_confirm": Confirmation,
    "approve_escalation": Approval,
}


# -- the booking system -----------------------------------------------------------------------


class Appointment(BaseModel):
    id: str
    when: str
    service: str = ""


class Slot(BaseModel):
    id: str
    when: str


class CancelResult(BaseModel):
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class Booking:
    """Where the booking system is and its token, read through agentd's secret reader on
    each run (`step.secret`): passed to the step functions, never journaled."""

    url: str
    token: str

    @classmethod
    def of(cls, step: AutoStep) -> Booking:
        return cls(step.secret(URL_SETTING).rstrip("/"), step.secret(TOKEN_SETTING))


async def _call(
    bk: Booking, method: str, path: str, body: dict[str, Any] | None = None, key: str = ""
) -> Any:
    """One JSON request. A 4xx is the booking system's answer (NonRetryable: asking again
    changes nothing); a 5xx or a network error is raised for the step's durable retries."""
    if not bk.url:
        raise NonRetryable(
            f"{URL_SETTING} is not set: put the booking system's address in agentd.env (or the "
            "daemon's environment, or a credential), then `agentd workflows retry ID`"
        )
    headers = {"Idempotency-Key": key} if key else {}
    if bk.token:
        headers["Authorization"] = f"Bearer {bk.token}"
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.request(method, bk.url + path, json=body, headers=headers) as resp,
    ):
        data = await resp.json(content_type=None)
        if resp.status >= 500:
            raise RuntimeError(f"booking system {method} {path}: HTTP {resp.status} {data}")
        if resp.status >= 400:
            raise NonRetryable(f"booking system {method} {path}: HTTP {resp.status} {data}")
        return data


async def lookup(bk: Booking, phone: str) -> list[str]:
    """The ids of the accounts with this phone number (none, one or several)."""
    data = await _call(bk, "GET", f"/customers?phone={phone.replace('+', '%2B')}")
    return [c["id"] for c in data["customers"]]


async def check_zip(bk: Booking, phone: str, zip_code: str) -> str | None:
    """The account with this phone whose ZIP matches, or None."""
    data = await _call(bk, "POST", "/customers/verify", {"phone": phone, "zip": zip_code})
    return data.get("customerId")


async def appointments(bk: Booking, customer_id: str) -> list[Appointment]:
    data = await _call(bk, "GET", f"/customers/{customer_id}/appointments")
    return [Appointment.model_validate(a) for a in data["appointments"]]


async def slots(bk: Booking, appointment_id: str) -> list[Slot]:
    data = await _call(bk, "GET", f"/appointments/{appointment_id}/slots")
    return [Slot.model_validate(s) for s in data["slots"]]


async def reschedule(bk: Booking, appointment_id: str, slot_id: str, key: str) -> str:
    data = await _call(
        bk, "POST", f"/appointments/{appointment_id}/reschedule", {"slotId": slot_id}, key
    )
    return str(data["when"])


async def cancel(bk: Booking, appointment_id: str, key: str) -> CancelResult:
    """A refusal (the appointment is locked, already done…) is an answer, not an error: the
    workflow escalates it. Network errors and 5xx are retried by the step."""
    try:
        await _call(bk, "POST", f"/appointments/{appointment_id}/cancel", {}, key)
    except NonRetryable as exc:
        return CancelResult(ok=False, reason=str(exc))
    return CancelResult(ok=True)


async def open_escalation(
    bk: Booking, kind: str, call: str, customer_id: str | None, why: str, key: str
) -> str:
    """A ticket in the CRM for a person to call back; its id."""
    body = {"kind": kind, "callSessionId": call, "customerId": customer_id, "reason": why}
    data = await _call(bk, "POST", "/escalations", body, key)
    return str(data["id"])


# -- the steps the three flows share ----------------------------------------------------------


def _key(step: AutoStep, name: str) -> str:
    # The same on every resume: the booking system applies a repeated request once.
    return f"{step.instance_id}:{name}"


@dataclass(frozen=True)
class Case:
    """What an escalation is about, for the ticket and for the supervisors."""

    kind: str
    call: str
    customer_id: str | None
    why: str


async def _approved(step: AutoStep, case: Case, wait: int) -> str | None:
    """Ask the supervisors to approve the ticket and wait for it: who approved, or None."""
    who = f"customer `{case.customer_id}`" if case.customer_id else "an unverified caller"
    data = '{"approve": true, "by": "YOUR NAME"}'
    await step.send(
        "approval",
        f"☎️ Approve an escalation ticket ({case.kind})? {who}, call `{case.call}`.\n{case.why}\n"
        f"Approve: `agentd workflows signal {step.instance_id} approve_escalation --data "
        f"'{data}'` (or the desk's `POST /hooks/…/events/approve_escalation`).",
        to="supervisors",
    )
    got = await step.wait_for_event("approve_escalation", wait)
    if got is None or got.payload.get("approve") is not True:
        return None
    return str(got.payload.get("by") or "a supervisor")


async def _escalate(step: AutoStep, bk: Booking, case: Case, approval: int | None) -> str | None:
    """Open a CRM ticket, then tell whoever takes escalations what needs a person: the chat the
    owner named `supervisors` in `[automations.chats]`, else the owner. With `approval` (the
    seconds to wait), a supervisor approves the ticket first; None: not approved (they are
    told, nothing is opened). When the CRM cannot be reached, they are told all the same: a
    person still has to call."""
    why = case.why
    if approval is not None:
        by = await _approved(step, case, approval)
        if by is None:
            await step.send(
                "notify",
                f"☎️ Not escalated ({case.kind}): no supervisor approved a ticket for call "
                f"`{case.call}`. Call the customer back from here.",
                to="supervisors",
            )
            return None
        why = f"{why}\nApproved by {by}."
    try:
        ticket = await step.do(
            "escalate",
            open_escalation,
            bk,
            case.kind,
            case.call,
            case.customer_id,
            why,
            _key(step, "escalate"),
            retry=HTTP_RETRY,
            timeout=HTTP_TIMEOUT,
        )
    except StepFailed as exc:
        ticket = "none"
        why = f"{why}\nNo ticket could be opened ({exc.message}): call them back from here."
    who = f"customer `{case.customer_id}`" if case.customer_id else "an unverified caller"
    await step.send(
        "notify",
        f"☎️ Escalated ({case.kind}), ticket `{ticket}`: {who}, call `{case.call}`.\n{why}",
        to="supervisors",
    )
    return ticket


async def _choose(
    step: AutoStep, event: str, field: str, options: list[str], wait: int
) -> str | None:
    """The only option, or the caller's choice among those offered (a choice not offered is
    refused before it is accepted; None: no valid choice in time)."""
    if len(options) == 1:
        return options[0]
    return await step.wait_for_choice(event, field, options, wait)


async def _confirmed(step: AutoStep, event: str, wait: int) -> bool | None:
    """The caller's yes or no (None: no answer in time)."""
    got = await step.wait_for_event(event, wait)
    return None if got is None else got.payload.get("confirm") is True


async def _unverified(step: AutoStep, call: str, customer_id: str, verification: str) -> str:
    """Why the caller may not change this customer's appointments ("" when they may): the
    named verify_caller instance must have verified this customer, in this same call."""
    state = await step.outcome("verified", verification)
    if state.workflow != "verify_caller" or state.status != "complete":
        return f"{verification} is not a finished verify_caller run; verify the caller first."
    output = state.output if isinstance(state.output, dict) else {}
    if output.get("status") != "verified" or output.get("customerId") != customer_id:
        return f"The caller was not verified as {customer_id}; verify them first."
    if state.input.get("callSessionId") != call:
        return "The caller was verified in another call; verify them in this one."
    return ""


def _approval(inp: VerifyInput | CancelInput) -> int | None:
    return inp.wait_seconds if inp.approve_tickets else None


# -- the flows --------------------------------------------------------------------------------


@workflow(
    "verify_caller",
    input=VerifyInput,
    output=VerifyOutput,
    version=2,
    events=VERIFY_EVENTS,
    tool=AsTool(
        description="Verify a caller by their phone number, then the 5-digit ZIP code they "
        "give (send it with automation_event verify_zip). Start this before any change.",
        risk="medium",
    ),
)
async def verify_caller(step: AutoStep, inp: VerifyInput) -> VerifyOutput:
    """Verify a caller: their phone number, then a 5-digit ZIP (two tries, then a person)."""
    bk = Booking.of(step)
    found = await step.do(
        "lookup", lookup, bk, inp.phone_e164, retry=HTTP_RETRY, timeout=HTTP_TIMEOUT
    )
    if not found:
        return VerifyOutput(
            status="needs_followup",
            customer_id=None,
            message=f"No account has the number {inp.phone_e164}; take the caller's details.",
        )
    candidate = found[0] if len(found) == 1 else None
    for attempt in range(1, MAX_ZIP_ATTEMPTS + 1):
        got = await step.wait_for_event(
            "verify_zip", inp.wait_seconds, name=f"wait:verify_zip#{attempt}"
        )
        if got is None:
            return VerifyOutput(
                status="needs_followup",
                customer_id=candidate,
                message="The caller gave no ZIP code in time; call them back to verify.",
            )
        zip_code = str(got.payload.get("zip", "")).strip()
        if not ZIP.fullmatch(zip_code):
            continue  # only an event from before version 2 checked it at the door gets here
        matched = await step.do(
            f"verify#{attempt}",
            check_zip,
            bk,
            inp.phone_e164,
            zip_code,
            retry=HTTP_RETRY,
            timeout=HTTP_TIMEOUT,
        )
        if matched:
            return VerifyOutput(
                status="verified", customer_id=matched, message="The caller is verified."
            )
    why = f"The caller on {inp.phone_e164} failed ZIP verification {MAX_ZIP_ATTEMPTS} times."
    case = Case("verification", inp.call_session_id, candidate, why)
    ticket = await _escalate(step, bk, case, _approval(inp))
    if ticket is None:
        return VerifyOutput(
            status="needs_followup",
            customer_id=candidate,
            message=f"Not verified after {MAX_ZIP_ATTEMPTS} attempts; no ticket was approved.",
        )
    return VerifyOutput(
        status="escalated",
        customer_id=candidate,
        message=f"Not verified after {MAX_ZIP_ATTEMPTS} attempts; escalated as {ticket}.",
    )


@workflow(
    "reschedule_appointment",
    input=RescheduleInput,
    output=RescheduleOutput,
    version=2,
    events=RESCHEDULE_EVENTS,
    tool=AsTool(
        description="Move a verified caller's appointment (give the verify_caller instance "
        "as verificationId); pass their choices with automation_event.",
        risk="medium",
    ),
)
async def reschedule_appointment(step: AutoStep, inp: RescheduleInput) -> RescheduleOutput:
    """Move a verified caller's appointment to another slot, once they confirm it."""

    def followup(
        message: str, appt: str | None = None, slot: str | None = None
    ) -> RescheduleOutput:
        return RescheduleOutput(
            status="needs_followup", appointment_id=appt, slot_id=slot, message=message
        )

    bk = Booking.of(step)
    refused = await _unverified(step, inp.call_session_id, inp.customer_id, inp.verification_id)
    if refused:
        return followup(refused)
    booked = await step.do(
        "appointments", appointments, bk, inp.customer_id, retry=HTTP_RETRY, timeout=HTTP_TIMEOUT
    )
    if not booked:
        return followup("The customer has no upcoming appointment to move.")
    appt = await _choose(
        step, "select_appointment", "appointmentId", [a.id for a in booked], inp.wait_seconds
    )
    if appt is None:
        return followup("No appointment was chosen; ask the caller which one to move.")
    free = await step.do("slots", slots, bk, appt, retry=HTTP_RETRY, timeout=HTTP_TIMEOUT)
    if not free:
        return followup(f"No free slot for {appt}; offer a call back.", appt)
    slot = await _choose(step, "select_slot", "slotId", [s.id for s in free], inp.wait_seconds)
    if slot is None:
        return followup("No slot was chosen; offer the free slots again.", appt)
    yes = await _confirmed(step, "confirm_reschedule", inp.wait_seconds)
    if yes is None:
        return followup("The caller did not confirm in time; nothing was changed.", appt, slot)
    if not yes:
        return RescheduleOutput(
            status="cancelled",
            appointment_id=appt,
            slot_id=slot,
            message="The caller kept the original time; nothing was changed.",
        )
    when = await step.do(
        "apply",
        reschedule,
        bk,
        appt,
        slot,
        _key(step, "apply"),
        retry=HTTP_RETRY,
        timeout=HTTP_TIMEOUT,
    )
    return RescheduleOutput(
        status="rescheduled", appointment_id=appt, slot_id=slot, message=f"Moved to {when}."
    )


@workflow(
    "cancel_appointment",
    input=CancelInput,
    output=CancelOutput,
    version=2,
    events=CANCEL_EVENTS,
    tool=AsTool(
        description="Cancel a verified caller's appointment (give the verify_caller instance "
        "as verificationId) once they confirm; pass their answers with automation_event.",
        risk="medium",
    ),
)
async def cancel_appointment(step: AutoStep, inp: CancelInput) -> CancelOutput:
    """Cancel a verified caller's appointment once they confirm; a refusal goes to a person."""

    def followup(message: str, appt: str | None = None) -> CancelOutput:
        return CancelOutput(status="needs_followup", appointment_id=appt, message=message)

    bk = Booking.of(step)
    refused = await _unverified(step, inp.call_session_id, inp.customer_id, inp.verification_id)
    if refused:
        return followup(refused)
    booked = await step.do(
        "appointments", appointments, bk, inp.customer_id, retry=HTTP_RETRY, timeout=HTTP_TIMEOUT
    )
    if not booked:
        return followup("The customer has no upcoming appointment to cancel.")
    appt = await _choose(
        step,
        "cancel_select_appointment",
        "appointmentId",
        [a.id for a in booked],
        inp.wait_seconds,
    )
    if appt is None:
        return followup("No appointment was chosen; ask the caller which one to cancel.")
    yes = await _confirmed(step, "cancel_confirm", inp.wait_seconds)
    if not yes:
        return followup("The caller did not confirm the cancellation; nothing was changed.", appt)
    try:
        result = await step.do(
            "cancel",
            cancel,
            bk,
            appt,
            _key(step, "cancel"),
            retry=HTTP_RETRY,
            timeout=HTTP_TIMEOUT,
        )
        what = "refused the cancellation"
    except StepFailed as exc:  # down through every retry: a person finishes it
        result = CancelResult(ok=False, reason=f"the booking system did not answer ({exc.message})")
        what = "could not be reached"
    if result.ok:
        return CancelOutput(status="cancelled", appointment_id=appt, message="Cancelled.")
    why = f"Cancelling {appt} failed: {result.reason}"
    case = Case("cancellation", inp.call_session_id, inp.customer_id, why)
    ticket = await _escalate(step, bk, case, _approval(inp))
    if ticket is None:
        return followup(f"The booking system {what}; no ticket was approved.", appt)
    return CancelOutput(
        status="escalated",
        appointment_id=appt,
        message=f"The booking system {what}; escalated as {ticket}.",
    )
