"""The one way a workflow sends something the user will see (docs/messages.md, "Exactly once,
counted").

Every sender (turn replies, command replies, reminders, approval cards, notices, files) calls
`deliver` (text of any length: `deliver_text`, which splits it as the channel needs), so each
gets the same three promises:

- retries: every Bot API call goes through the session's one retry policy
  (telegram/session.py), which counts a transient failure after which the message may have
  arrived (`send_uncertain`, method and reason); a send still failing for a transient reason
  once those are spent (the network or the chat service down for minutes) is tried again by
  the step (`OUTAGE`: every minute for about ten hours, the waits durable sleeps that a
  restart keeps), so an outage delays what agentd says instead of losing it;
- the kill window: the step is marked (`Step.do(mark=True)`), so an attempt the process died
  in (after Telegram took the message, before its id was committed) stays visible;
- the accounting: the re-run of such a step writes one `send_uncertain` audit row before it
  sends again, so the user may see the message twice, never uncounted; on a channel whose
  server deduplicates re-sends (Matrix: the transaction id comes from `SEND_KEY`, the same on
  every re-run) the re-send is the same message, so there is nothing to count.

A platform refusal (`SendFailed`: blocked bot, bad chat), or any error that is not an outage
(`SendDelayed`), fails the step without retrying; refused credentials wait for a restart.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from agentd.chat import quotable
from agentd.chat.channel import CredentialsRejected
from agentd.chat.outbox import Button, Outbox, SendDelayed, SendFailed
from agentd.db import Database
from agentd.durable import NonRetryable, Retry, Step, store
from agentd.ledger import audit

T = TypeVar("T")


@dataclass
class SendKey:
    """The identity of the send under way: the same on every re-run of its step. A channel
    whose server deduplicates by an id the client chooses (Matrix's transaction id) derives
    that id from it, so the re-send after a crash is the same message, not a second one.

    `settle` is called once the channel is known, before anything is sent: a channel that
    deduplicates (`idempotent`) makes a re-send no duplicate, so nothing is counted; any other
    counts the re-send (`send_uncertain`) first, as it may show the message twice."""

    key: str
    resend: Callable[[], Awaitable[Any]] | None = None  # counts this re-send; None: first run
    # An earlier process ran this instance: what it sent before it died (a draft whose id it
    # never wrote down, say) may be on the server already.
    resumed: bool = False
    calls: int = 0
    settled: bool = False

    def next(self) -> str:
        """The id of the step's next request (a step may make several, always in one order)."""
        self.calls += 1
        return f"{self.key}/{self.calls}"

    async def settle(self, *, idempotent: bool) -> None:
        if self.settled:
            return
        self.settled = True
        if self.resend is not None and not idempotent:
            await self.resend()


SEND_KEY: ContextVar[SendKey | None] = ContextVar("agentd_send_key", default=None)
# After the channel's own retries: 5 s, 10 s, 20 s, 40 s, then every minute (the chat's later
# turns wait behind it, so not longer once the network is back), about ten hours in all.
OUTAGE = Retry(limit=600, delay=5.0, backoff="exponential", max_delay=60.0)
# A file is uploaded again each time (up to 50 MB): for minutes (about 6), not hours, so a
# server that keeps failing after the upload cannot cost gigabytes; the text before it waited.
FILE_OUTAGE = Retry(limit=10, delay=5.0, backoff="exponential", max_delay=60.0)
# What `deliver` waits out instead of ending on: an outage (tried again, OUTAGE) and refused
# credentials (until the restart after their fix). A send inside `deliver` that is only best
# effort (a notice, a card the CLI can stand in for) gives up on anything else, not on these.
WAITED_OUT = (SendDelayed, CredentialsRejected)


async def settle_send(*, idempotent: bool) -> None:
    """Called by a channel's outbox before it sends: whether a re-send there can duplicate."""
    key = SEND_KEY.get()
    if key is not None:
        await key.settle(idempotent=idempotent)


async def count_resend(
    db: Database, instance_id: str, step_name: str, chat_id: int | None, method: str
) -> int:
    """Inside a marked send step's attempt: count the earlier attempts the process died in,
    with one `send_uncertain` row for this re-send (idempotent per number of such attempts)."""
    interrupted = await db.read(store.interrupted_attempts, instance_id, step_name)
    if interrupted:
        await db.write(
            lambda conn: audit.record(
                conn,
                "send_uncertain",
                chat_id=chat_id,
                instance_id=instance_id,
                detail={
                    "method": method,
                    "step": step_name,
                    "reason": "re-sent after the process stopped during the send",
                },
                source_key=f"{instance_id}:{step_name}:resent:{interrupted}",
            )
        )
    return interrupted


async def deliver(
    step: Step,
    db: Database,
    name: str,
    chat_id: int | None,
    send: Callable[[], Awaitable[T]],
    *,
    method: str = "sendMessage",
    result_type: Any = int,
) -> T:
    """Run `send()` as the journaled, marked step `name`; return what it returned (a message
    id, usually). `send` must be the send alone: anything before it re-runs on a re-send."""
    instance_id, resumed = step.instance_id, step.resumed

    async def resend() -> None:
        await count_resend(db, instance_id, name, chat_id, method)

    async def attempt() -> T:
        # Only a run after a restart can find an attempt an earlier process died in. The
        # channel's outbox settles the count before it sends (`settle_send`); one that does
        # not is counted once its send returned.
        key = SendKey(f"{instance_id}/{name}", resend if resumed else None, resumed)
        token = SEND_KEY.set(key)
        try:
            result = await send()
        except (*WAITED_OUT, NonRetryable):
            raise
        except SendFailed as exc:
            raise NonRetryable(str(exc)) from None
        except Exception as exc:
            # Anything else is no outage: trying it again for hours would only hide it.
            raise NonRetryable(f"{type(exc).__name__}: {exc}") from exc
        finally:
            SEND_KEY.reset(token)
        await key.settle(idempotent=False)
        return result

    outage = FILE_OUTAGE if method == "sendDocument" else OUTAGE
    return await step.do(name, attempt, mark=True, result_type=result_type, retry=outage)


async def deliver_text(
    step: Step,
    db: Database,
    name: str,
    outbox: Outbox,
    chat_id: int,
    text: str,
    *,
    reply_to: int | None = None,
    buttons: list[list[Button]] | None = None,
    finish: Callable[[str], Awaitable[str]] | None = None,
    notice: bool = False,
) -> int:
    """Text of any length, through `deliver`, in as many messages as the channel takes: one
    too long is refused for good, and the user would see nothing. The first message is the
    step `name` (so a one-message send replays as the same step) and answers `reply_to`; the
    next are `name#2`, `name#3`…; `buttons` go under the last, after what they act on.
    `finish(chunk)` runs inside each send (a link made at send time is never journaled).
    `notice`: a notice, whose messages' texts are kept so a reply quotes them as sent
    (chat/quotable.py; the chunk before `finish`). Returns the first message's id."""
    # An empty text goes as it is, for the channel to refuse like any unsendable message.
    chunks = outbox.split(text) or [text]
    ids: list[int] = []
    for n, chunk in enumerate(chunks, start=1):
        send = partial(
            _send_chunk,
            outbox,
            chat_id,
            chunk,
            reply_to if n == 1 else None,
            buttons if n == len(chunks) else None,
            finish,
        )
        message_id = await deliver(step, db, name if n == 1 else f"{name}#{n}", chat_id, send)
        if notice:  # after the send's step, so a replay keeps it if a crash came between
            await db.write(quotable.keep, chat_id, message_id, chunk, time.time())
        ids.append(message_id)
    return ids[0]


async def _send_chunk(
    outbox: Outbox,
    chat_id: int,
    chunk: str,
    reply_to: int | None,
    buttons: list[list[Button]] | None,
    finish: Callable[[str], Awaitable[str]] | None,
) -> int:
    text = await finish(chunk) if finish else chunk
    return await outbox.send_text(chat_id, text, reply_to=reply_to, buttons=buttons or None)
