"""The SQL of automations as plain functions of a connection: the daemon, the webhook listener
and the CLI share them, so a start or a signal from any of them is one transaction."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from pydantic import BaseModel

from agentd.automations.api import RunState
from agentd.automations.catalog import Catalog
from agentd.durable import InstanceNotFound, InvalidInput, Limits, store

QUESTION_SUFFIX = ":question"  # the step of ask_owner NAME that records the question
MAX_INPUT_BYTES = Limits().max_input_bytes  # an input or event's JSON, as the engine allows
ANSWER_PREFIX = "answer:"  # the event type an ask_owner step named NAME waits for: answer:NAME


class Started(BaseModel):
    instance_id: str
    created: bool  # False: this id (the same key or delivery) was started before
    version: str


class Question(BaseModel):
    id: str
    instance_id: str
    step: str
    chat_id: int
    text: str
    choices: list[str]
    default_choice: str | None
    message_id: int | None
    status: str
    answer: str | None
    answered_by: str | None
    created_at: float
    expires_at: float


def instance_id_for(name: str, key: str | None, *, scope: str = "k") -> str:
    """A new id, or the one id this key always maps to (so a repeated start is no new run)."""
    if key is None:
        return f"{name}-{secrets.token_hex(8)}"
    digest = hashlib.sha256(f"{name}\0{scope}\0{key}".encode()).hexdigest()[:24]
    return f"{name}-{scope}{digest}"


def start(
    conn: Any,
    catalog: Catalog,
    name: str,
    payload: object,
    *,
    instance_id: str,
    source: str,
    now: float,
) -> Started:
    """Validate the input against the newest version and create the instance (its own key:
    automations run concurrently). InvalidInput / WorkflowNotFound say what is wrong."""
    auto, raw = catalog.validated_input(name, payload)
    if len(raw) > MAX_INPUT_BYTES:
        raise InvalidInput(f"input of {name} is {len(raw)} bytes, over {MAX_INPUT_BYTES}")
    created = store.insert_instance(
        conn, instance_id=instance_id, workflow=name, key=instance_id, input_json=raw, now=now
    )
    if created:
        conn.execute(
            "INSERT INTO automation_runs (instance_id, automation, version, source, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (instance_id, name, auto.version, source, now),
        )
        return Started(instance_id=instance_id, created=True, version=auto.version)
    existing = store.get_instance(conn, instance_id)
    if existing.workflow != name:
        raise ValueError(f"instance {instance_id} belongs to workflow {existing.workflow!r}")
    return Started(instance_id=instance_id, created=False, version=version_of(conn, instance_id))


def version_of(conn: Any, instance_id: str) -> str:
    row = conn.execute(
        "SELECT version FROM automation_runs WHERE instance_id = ?", (instance_id,)
    ).fetchone()
    return row[0] if row else ""


def set_version(conn: Any, instance_id: str, version: str) -> None:
    conn.execute(
        "UPDATE automation_runs SET version = ? WHERE instance_id = ?", (version, instance_id)
    )


def signal(
    conn: Any,
    instance_id: str,
    event: str,
    data: dict[str, Any],
    now: float,
    event_id: str | None = None,
    *,
    workflow: str | None = None,
    catalog: Catalog | None = None,
) -> bool:
    """Deliver an event to an open instance's mailbox; False if event_id was delivered before.
    `answer:NAME` events are checked against the question's choices and settle it; others
    against the automation's declared event model (with `catalog`) and the choices the
    instance offered (InvalidInput: nothing is delivered)."""
    if len(json.dumps(data)) > MAX_INPUT_BYTES:
        raise ValueError(f"event data over {MAX_INPUT_BYTES} bytes")
    inst = store.get_instance(conn, instance_id)
    if workflow is not None and inst.workflow != workflow:
        raise InstanceNotFound(f"no instance {instance_id!r} of workflow {workflow!r}")
    if inst.status in store.FINAL_STATUSES:
        raise ValueError(f"{instance_id} already finished ({inst.status}); it takes no events")
    if not event.startswith(ANSWER_PREFIX):
        if catalog is not None:
            data = catalog.validated_event(
                inst.workflow, version_of(conn, instance_id), event, data
            )
        _check_offer(conn, instance_id, event, data)
    if event.startswith(ANSWER_PREFIX):
        question = question_of(conn, instance_id, event[len(ANSWER_PREFIX) :])
        if question is not None:
            choice = data.get("choice")
            if choice not in question.choices:
                raise ValueError(f"choice must be one of {question.choices}, not {choice!r}")
            if not _settle(conn, question, str(choice), str(data.get("by") or "cli"), now):
                raise ValueError(f"that question is {question.status.replace('_', ' ')}")
            event_id = event_id or f"answer:{question.id}"
    return bool(store.insert_event(conn, instance_id, event, data, now, event_id))


# -- what the running daemon loaded ---------------------------------------------------------------


def record_loaded(conn: Any, catalog: Catalog, pid: int, now: float) -> None:
    """Replace the daemon's list of loaded automations (at its start and each reload); a row
    with an empty name marks the list as this pid's even when it loaded none."""
    conn.execute("DELETE FROM automation_loaded")
    rows = [("", "", "", pid, now)] + [
        (name, version, auto.source, pid, now)
        for name, versions in catalog.versions.items()
        for version, auto in versions.items()
    ]
    conn.executemany(
        "INSERT INTO automation_loaded (automation, version, source, pid, loaded_at) "
        "VALUES (?, ?, ?, ?, ?)",
        rows,
    )


def loaded_by(conn: Any, pid: int) -> dict[str, set[str]] | None:
    """Each automation the daemon with this pid loaded, with its versions; None when it has
    not said yet (it is still starting, or older than this table)."""
    try:
        rows = conn.execute(
            "SELECT automation, version FROM automation_loaded WHERE pid = ?", (pid,)
        ).fetchall()
    except Exception:  # a database the daemon has not migrated yet
        return None
    if ("", "") not in {(r[0], r[1]) for r in rows}:
        return None
    loaded: dict[str, set[str]] = {}
    for name, version in rows:
        if name:
            loaded.setdefault(name, set()).add(version)
    return loaded


def last_loaded(conn: Any) -> set[str] | None:
    """The automations the daemon that ran last loaded (running now or not); None when no
    daemon has said yet. Each start and reload replaces the whole list."""
    try:
        rows = conn.execute("SELECT automation FROM automation_loaded").fetchall()
    except Exception:  # a database the daemon has not migrated yet
        return None
    if not rows:
        return None
    return {name for (name,) in rows if name}


# -- offers (step.wait_for_choice) ------------------------------------------------------------


def record_offer(
    conn: Any, instance_id: str, event: str, field: str, options: list[str], now: float
) -> None:
    """The choices an instance waits for on `event` (a later offer replaces an earlier one)."""
    conn.execute(
        "INSERT INTO automation_offers (instance_id, event, field, options, created_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (instance_id, event) DO UPDATE SET "
        "field = excluded.field, options = excluded.options, created_at = excluded.created_at",
        (instance_id, event, field, json.dumps(options), now),
    )


def offer_of(conn: Any, instance_id: str, event: str | None = None) -> tuple[str, str, list[str]]:
    """(event, field, options) of the instance's newest offer (for `event`, when given), or
    ("", "", []) when it made none."""
    sql = "SELECT event, field, options FROM automation_offers WHERE instance_id = ?"
    args: tuple[Any, ...] = (instance_id,)
    if event is not None:
        sql, args = sql + " AND event = ?", (instance_id, event)
    row = conn.execute(sql + " ORDER BY created_at DESC LIMIT 1", args).fetchone()
    return (row[0], row[1], json.loads(row[2])) if row else ("", "", [])


def _check_offer(conn: Any, instance_id: str, event: str, data: dict[str, Any]) -> None:
    _, field, options = offer_of(conn, instance_id, event)
    if field and data.get(field) not in options:
        raise InvalidInput(
            f"{field} {data.get(field)!r} was not offered for {event}; choose one of: "
            + ", ".join(options)
        )


def state(conn: Any, instance_id: str) -> RunState:
    """Where an instance is, for the status endpoint, `step.outcome` and the model's tool."""
    inst = store.find_instance(conn, instance_id)
    if inst is None:
        raise InstanceNotFound(f"no workflow instance {instance_id!r}")
    waiting = inst.waiting_for if inst.status == "waiting" else None
    _, _, offered = offer_of(conn, instance_id, waiting) if waiting else ("", "", [])
    return RunState(
        instance_id=inst.id,
        workflow=inst.workflow,
        status=inst.status,
        input=json.loads(inst.input),
        output=json.loads(inst.output) if inst.output else None,
        error=inst.error,
        waiting_for=waiting,
        offered=offered,
    )


# -- questions (step.ask_owner) ---------------------------------------------------------------


_QCOLS = (
    "id, instance_id, step, chat_id, text, choices, default_choice, message_id, status, answer, "
    "answered_by, created_at, expires_at"
)


def _question(row: Any) -> Question:
    data = dict(zip(_QCOLS.split(", "), row, strict=True))
    data["choices"] = json.loads(data["choices"])
    return Question.model_validate(data)


def create_question(
    conn: Any,
    instance_id: str,
    step: str,
    chat_id: int,
    text: str,
    choices: list[str],
    default: str | None,
    now: float,
    timeout: float,
) -> Question:
    conn.execute(
        f"INSERT INTO automation_questions ({_QCOLS}) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, NULL, 'pending', NULL, NULL, ?, ?) "
        "ON CONFLICT (instance_id, step) DO NOTHING",
        (
            secrets.token_hex(5),
            instance_id,
            step,
            chat_id,
            text,
            json.dumps(choices),
            default,
            now,
            now + timeout,
        ),
    )
    question = question_of(conn, instance_id, step)
    assert question is not None
    return question


def question_of(conn: Any, instance_id: str, step: str) -> Question | None:
    row = conn.execute(
        f"SELECT {_QCOLS} FROM automation_questions WHERE instance_id = ? AND step = ?",
        (instance_id, step),
    ).fetchone()
    return _question(row) if row else None


def get_question(conn: Any, question_id: str) -> Question | None:
    row = conn.execute(
        f"SELECT {_QCOLS} FROM automation_questions WHERE id = ?", (question_id,)
    ).fetchone()
    return _question(row) if row else None


def set_question_message(conn: Any, question_id: str, message_id: int) -> None:
    conn.execute(
        "UPDATE automation_questions SET message_id = ? WHERE id = ?", (message_id, question_id)
    )


def _settle(conn: Any, question: Question, choice: str, by: str, now: float) -> bool:
    if question.status != "pending" or now >= question.expires_at:
        return False
    cursor = conn.execute(
        "UPDATE automation_questions SET status = 'answered', answer = ?, answered_by = ? "
        "WHERE id = ? AND status = 'pending'",
        (choice, by, question.id),
    )
    return cursor.rowcount == 1


def answer(conn: Any, question_id: str, index: int, by: str, now: float) -> str:
    """A button press (inside the intake transaction): settle and wake the waiting step."""
    question = get_question(conn, question_id)
    if question is None or not 0 <= index < len(question.choices):
        return "This button is not recognised."
    inst = store.find_instance(conn, question.instance_id)
    if inst is None or inst.status in store.FINAL_STATUSES:
        return "That workflow is over; nothing was changed."
    choice = question.choices[index]
    if not _settle(conn, question, choice, by, now):
        if question.status == "answered":
            return f"Already answered: {question.answer}."
        return "This question has expired."
    store.insert_event(
        conn,
        question.instance_id,
        ANSWER_PREFIX + question.step,
        {"choice": choice, "by": by},
        now,
        f"answer:{question.id}",
    )
    return f"Answered: {choice}."


def expire_question(conn: Any, question_id: str, now: float) -> Question:
    """At the deadline: timed out, unless an answer landed first (then that answer stands)."""
    conn.execute(
        "UPDATE automation_questions SET status = 'timed_out', answered_by = 'timeout' "
        "WHERE id = ? AND status = 'pending'",
        (question_id,),
    )
    question = get_question(conn, question_id)
    assert question is not None
    return question


# -- retry from a named step -------------------------------------------------------------------


def retry_from(conn: Any, instance_id: str, step: str, version: str | None, now: float) -> int:
    """Forget the journal from the named step on and queue the instance again (on `version`,
    the code now loaded, when given); return the step's ordinal. Events it consumed stay
    consumed: a wait it re-runs waits for a new one."""
    inst = store.get_instance(conn, instance_id)
    if inst.status not in store.FINAL_STATUSES:
        raise ValueError(f"{instance_id} is {inst.status}; cancel it first or wait for it")
    row = conn.execute(
        "SELECT MIN(ordinal) FROM workflow_steps WHERE instance_id = ? AND name = ?",
        (instance_id, step),
    ).fetchone()
    if row[0] is None:
        names = [s.name for s in store.load_steps(conn, instance_id).values()]
        raise ValueError(f"{instance_id} has no step {step!r}; its steps: {names}")
    ordinal = int(row[0])
    forgotten = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM workflow_steps WHERE instance_id = ? AND ordinal >= ?",
            (instance_id, ordinal),
        )
    ]
    for table in ("workflow_attempts", "workflow_steps"):
        conn.execute(
            f"DELETE FROM {table} WHERE instance_id = ? AND ordinal >= ?", (instance_id, ordinal)
        )
    # A question whose asking step is forgotten is asked again: a fresh row, fresh buttons.
    for name in forgotten:
        if name.endswith(QUESTION_SUFFIX):
            conn.execute(
                "DELETE FROM automation_questions WHERE instance_id = ? AND step = ?",
                (instance_id, name[: -len(QUESTION_SUFFIX)]),
            )
    if version is not None:
        set_version(conn, instance_id, version)
    store.requeue_retried(conn, instance_id, now)
    return ordinal
