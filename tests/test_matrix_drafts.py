"""A Matrix draft's end and its row (matrix/output.py `end_draft`): the row goes once the
homeserver took the end, or refused it for good; one the homeserver could not take now (down,
overloaded) stays, for the next start's sweep (agent/streaming.py `end_left_drafts`), and
retention leaves it (matrix/kept.py)."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.db import Database
from agentd.matrix import ids
from agentd.matrix.client import MatrixError, MatrixFault
from agentd.matrix.output import MatrixOutbox, _save_draft


class Homeserver:
    """The client's send, refusing every edit with `fault` (None: taking it)."""

    def __init__(self, fault: MatrixFault | None) -> None:
        self.fault = fault
        self.sent: list[dict[str, Any]] = []

    async def send(self, room_id: str, event_type: str, content: dict[str, Any], txn: str) -> str:
        self.sent.append(content)
        if self.fault is not None:
            raise MatrixError(self.fault)
        return "$edit"


DOWN = MatrixFault(kind="transient", reason="HTTP 502")
LEFT = MatrixFault(kind="permanent", reason="HTTP 403 M_FORBIDDEN")


@pytest.mark.parametrize(("fault", "kept"), [(None, 0), (DOWN, 1), (LEFT, 0)])
async def test_a_drafts_row_stays_only_while_its_end_can_still_be_made(
    db: Database, fault: MatrixFault | None, kept: int
) -> None:
    chat = await db.write(ids.local_id, "room", "!room:agentd.test")
    await db.write(_save_draft, chat, 9, "$draft")
    server = Homeserver(fault)
    outbox = MatrixOutbox(server, max_message_chars=4000, max_file_bytes=1)  # type: ignore[arg-type]
    outbox.bind(db)
    await outbox.end_draft(chat, 9, "_(stopped)_")
    assert [c["m.relates_to"]["event_id"] for c in server.sent] == ["$draft"]
    rows = await db.read(lambda c: c.execute("SELECT event_id FROM matrix_drafts").fetchall())
    assert len(rows) == kept
