"""A customer-service desk for appointments, as three automations: verify a caller, reschedule
an appointment, cancel one. Each talks to the booking system over HTTP (JSON), one journaled
step per call, so a restart never repeats a finished call and the changes (reschedule, cancel,
escalation) carry an idempotency key the booking system deduplicates on.

The caller's answers (a ZIP code, a choice, a confirmation) arrive as events: from the phone
system through the webhook (`POST /hooks/calls/events/verify_zip`) or from the shell
(`agentd workflows signal ID verify_zip --data '{"zip": "94107"}'`). See README.md here.

Settings come from the daemon's environment, read inside steps (so a resume uses what the
journal recorded): `APPOINTMENTS_BOOKING_URL` (required), `APPOINTMENTS_BOOKING_TOKEN`
(optional bearer token).
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from agentd.automations import AutoStep, NonRetryable, Retry, StepFailed, workflow

WAIT_SECONDS = 15 * 60  # how long a caller's answer may take before a person follows up
MAX_ZIP_ATTEMPTS = 2
HTTP_RETRY = Retry(limit=4, delay=0.5, max_delay=10.0)
HTTP_TIMEOUT = 15.0
ZIP = re.compile(r"\d{5}")


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


class VerifyOutput(Schema):
    status: Literal["verified", "escalated", "needs_followup"]
    customer_id: str | None
    message: str


class RescheduleInput(Schema):
    call_session_id: str = Field(min_length=1, max_length=200)
    customer_id: str = Field(min_length=1, max_length=200)
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
    intent: Literal["cancel"] = "cancel"
    message: str = Field(default="", max_length=4000)
    wait_seconds: int = Field(default=WAIT_SECONDS, ge=1, le=86400)


class CancelOutput(Schema):
    status: Literal["cancelled", "needs_followup", "escalated"]
    appointment_id: str | None
    message: str


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


async def _call(method: str, path: str, body: dict[str, Any] | None = None, key: str = "") -> Any:
    """One JSON request. A 4xx is the booking system's answer (NonRetryable: asking again
    changes nothing); a 5xx or a network error is raised for the step's durable retries."""
    base = os.environ.get("APPOINTMENTS_BOOKING_URL", "").rstrip("/")
    if not base:
        raise NonRetryable(
            "APPOINTMENTS_BOOKING_URL is not set: put the booking system's address in the "
            "daemon's environment, then `agentd workflows retry ID`"
        )
    headers = {"Idempotency-Key": key} if key else {}
    if token := os.environ.get("APPOINTMENTS_BOOKING_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.request(method, base + path, json=body, headers=headers) as resp,
    ):
        data = await resp.json(content_type=None)
        if resp.status >= 500:
            raise RuntimeError(f"booking system {method} {path}: HTTP {resp.status} {data}")
        if resp.status >= 400:
            raise NonRetryable(f"booking system {method} {path}: HTTP {resp.status} {data}")
        return data


async def lookup(phone: str) -> list[str]:
    """The ids of the accounts with this phone number (none, one or several)."""
    data = await _call("GET", f"/customers?phone={phone.replace('+', '%2B')}")
    return [c["id"] for c in data["customers"]]


async def check_zip(phone: str, zip_code: str) -> str | None:
    """The account with this phone whose ZIP matches, or None."""
    data = await _call("POST", "/customers/verify", {"phone": phone, "zip": zip_code})
    return data.get("customerId")


async def appointments(customer_id: str) -> list[Appointment]:
    data = await _call("GET", f"/customers/{customer_id}/appointments")
    return [Appointment.model_validate(a) for a in data["appointments"]]


async def slots(appointment_id: str) -> list[Slot]:
    data = await _call("GET", f"/appointments/{appointment_id}/slots")
    return [Slot.model_validate(s) for s in data["slots"]]


async def reschedule(appointment_id: str, slot_id: str, key: str) -> str:
    data = await _call(
        "POST", f"/appointments/{appointment_id}/reschedule", {"slotId": slot_id}, key
    )
    return str(data["when"])


async def cancel(appointment_id: str, key: str) -> CancelResult:
    """A refusal (the appointment is locked, already done…) is an answer, not an error: the
    workflow escalates it. Network errors and 5xx are retried by the step."""
    try:
        await _call("POST", f"/appointments/{appointment_id}/cancel", {}, key)
    except NonRetryable as exc:
        return CancelResult(ok=False, reason=str(exc))
    return CancelResult(ok=True)


async def open_escalation(kind: str, call: str, customer_id: str | None, why: str, key: str) -> str:
    """A ticket in the CRM for a person to call back; its id."""
    body = {"kind": kind, "callSessionId": call, "customerId": customer_id, "reason": why}
    data = await _call("POST", "/escalations", body, key)
    return str(data["id"])


# -- the steps the three flows share ----------------------------------------------------------


def _key(step: AutoStep, name: str) -> str:
    # The same on every resume: the booking system applies a repeated request once.
    return f"{step.instance_id}:{name}"


async def _escalate(step: AutoStep, kind: str, call: str, customer_id: str | None, why: str) -> str:
    """Open a CRM ticket, then tell whoever takes escalations what needs a person: the chat the
    owner named `supervisors` in `[automations.chats]`, else the owner. When the CRM cannot be
    reached either, they are told all the same: a person still has to call."""
    try:
        ticket = await step.do(
            "escalate",
            open_escalation,
            kind,
            call,
            customer_id,
            why,
            _key(step, "escalate"),
            retry=HTTP_RETRY,
            timeout=HTTP_TIMEOUT,
        )
    except StepFailed as exc:
        ticket = "none"
        why = f"{why}\nNo ticket could be opened ({exc.message}): call them back from here."
    who = f"customer `{customer_id}`" if customer_id else "an unverified caller"
    await step.send(
        "notify",
        f"☎️ Escalated ({kind}), ticket `{ticket}`: {who}, call `{call}`.\n{why}",
        to="supervisors",
    )
    return ticket


async def _choose(
    step: AutoStep, event: str, field: str, options: list[str], wait: int
) -> str | None:
    """The only option, or the caller's choice among several (None: no valid answer in time)."""
    if len(options) == 1:
        return options[0]
    got = await step.wait_for_event(event, wait)
    if got is None:
        return None
    chosen = got.payload.get(field)
    return chosen if chosen in options else None


async def _confirmed(step: AutoStep, event: str, wait: int) -> bool | None:
    """The caller's yes or no (None: no answer in time)."""
    got = await step.wait_for_event(event, wait)
    return None if got is None else got.payload.get("confirm") is True


# -- the flows --------------------------------------------------------------------------------


@workflow("verify_caller", input=VerifyInput, output=VerifyOutput, version=1)
async def verify_caller(step: AutoStep, inp: VerifyInput) -> VerifyOutput:
    """Verify a caller: their phone number, then a 5-digit ZIP (two tries, then a person)."""
    found = await step.do("lookup", lookup, inp.phone_e164, retry=HTTP_RETRY, timeout=HTTP_TIMEOUT)
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
            continue  # not a ZIP code: a failed attempt, with nothing to ask the booking system
        matched = await step.do(
            f"verify#{attempt}",
            check_zip,
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
    ticket = await _escalate(step, "verification", inp.call_session_id, candidate, why)
    return VerifyOutput(
        status="escalated",
        customer_id=candidate,
        message=f"Not verified after {MAX_ZIP_ATTEMPTS} attempts; escalated as {ticket}.",
    )


@workflow("reschedule_appointment", input=RescheduleInput, output=RescheduleOutput, version=1)
async def reschedule_appointment(step: AutoStep, inp: RescheduleInput) -> RescheduleOutput:
    """Move a verified caller's appointment to another slot, once they confirm it."""

    def followup(
        message: str, appt: str | None = None, slot: str | None = None
    ) -> RescheduleOutput:
        return RescheduleOutput(
            status="needs_followup", appointment_id=appt, slot_id=slot, message=message
        )

    booked = await step.do(
        "appointments", appointments, inp.customer_id, retry=HTTP_RETRY, timeout=HTTP_TIMEOUT
    )
    if not booked:
        return followup("The customer has no upcoming appointment to move.")
    appt = await _choose(
        step, "select_appointment", "appointmentId", [a.id for a in booked], inp.wait_seconds
    )
    if appt is None:
        return followup("No appointment was chosen; ask the caller which one to move.")
    free = await step.do("slots", slots, appt, retry=HTTP_RETRY, timeout=HTTP_TIMEOUT)
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
        appt,
        slot,
        _key(step, "apply"),
        retry=HTTP_RETRY,
        timeout=HTTP_TIMEOUT,
    )
    return RescheduleOutput(
        status="rescheduled", appointment_id=appt, slot_id=slot, message=f"Moved to {when}."
    )


@workflow("cancel_appointment", input=CancelInput, output=CancelOutput, version=1)
async def cancel_appointment(step: AutoStep, inp: CancelInput) -> CancelOutput:
    """Cancel a verified caller's appointment once they confirm; a refusal goes to a person."""
    booked = await step.do(
        "appointments", appointments, inp.customer_id, retry=HTTP_RETRY, timeout=HTTP_TIMEOUT
    )
    if not booked:
        return CancelOutput(
            status="needs_followup",
            appointment_id=None,
            message="The customer has no upcoming appointment to cancel.",
        )
    appt = await _choose(
        step,
        "cancel_select_appointment",
        "appointmentId",
        [a.id for a in booked],
        inp.wait_seconds,
    )
    if appt is None:
        return CancelOutput(
            status="needs_followup",
            appointment_id=None,
            message="No appointment was chosen; ask the caller which one to cancel.",
        )
    yes = await _confirmed(step, "cancel_confirm", inp.wait_seconds)
    if not yes:
        return CancelOutput(
            status="needs_followup",
            appointment_id=appt,
            message="The caller did not confirm the cancellation; nothing was changed.",
        )
    try:
        result = await step.do(
            "cancel",
            cancel,
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
    ticket = await _escalate(step, "cancellation", inp.call_session_id, inp.customer_id, why)
    return CancelOutput(
        status="escalated",
        appointment_id=appt,
        message=f"The booking system {what}; escalated as {ticket}.",
    )
