"""Journal `tests/reach_flow.py` up to its question, with whatever agentd is importable, and
write the instance's rows as JSON (tests/test_automation_reach.py replays them).

The committed `before.json` was made with the code from before automations reached the owner
through chat/reach.py:  PYTHONPATH=<that checkout> python tests/data/reach_journal/record.py OUT
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentd.automations.catalog import Catalog
from agentd.automations.runtime import Runtime
from agentd.config import Config
from agentd.db import Database
from agentd.durable import Engine, FakeClock, store

OWNER = 42
INSTANCE = "reach-before"
FLOW = Path(__file__).resolve().parents[2] / "reach_flow.py"


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    async def send_text(self, chat_id: int, text: str, **_: Any) -> int:
        self.sent.append((chat_id, text))
        return len(self.sent)

    async def edit_text(self, chat_id: int, message_id: int, text: str, **_: Any) -> None:
        pass


def rows_of(conn: Any, instance_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every row that belongs to the instance, by table."""
    found: dict[str, list[dict[str, Any]]] = {}
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        key = "id" if table == "workflow_instances" else "instance_id"
        if key not in columns:
            continue
        cur = conn.execute(f"SELECT * FROM {table} WHERE {key} = ?", (instance_id,))
        rows = [dict(zip(columns, r, strict=True)) for r in cur.fetchall()]
        if rows:
            found[table] = rows
    return found


async def record(out: Path) -> None:
    spec = importlib.util.spec_from_file_location("reach_flow", FLOW)
    assert spec is not None and spec.loader is not None
    flow = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flow)
    with tempfile.TemporaryDirectory() as tmp:
        db = await Database.open(Path(tmp) / "a.db")
        clock = FakeClock()
        engine = Engine(db, clock=clock, poll_interval=0.02)
        catalog = Catalog()
        catalog.add(flow.reach_flow)
        config = Config(access={"owner_id": OWNER, "allowed_user_ids": [OWNER]})  # type: ignore[arg-type]
        outbox = Outbox()
        runtime = Runtime(
            config=config,
            db=db,
            clock=clock,
            catalog=catalog,
            outbox=outbox,  # type: ignore[arg-type]
            llm=None,
            kick=engine.kick,
        )
        for wf in runtime.workflows():
            engine.register(wf)
        await engine.run()
        await runtime.start("reach_flow", {"text": ""}, instance_id=INSTANCE, source="test")
        for _ in range(3000):
            inst = await db.read(store.get_instance, INSTANCE)
            if inst.status == "waiting":
                break
            await asyncio.sleep(0.01)
        assert inst.status == "waiting", inst
        await engine.shutdown(grace=0.2)
        rows = await db.read(rows_of, INSTANCE)
        await db.close()
    out.write_text(json.dumps({"sent": outbox.sent, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(record(Path(sys.argv[1])))
