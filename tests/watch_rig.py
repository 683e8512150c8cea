"""Watches in one process on the real engine, database and Anthropic client, with a FakeClock:
what the unit tests and benchmarks/watch_cost.py drive (the end-to-end tests start `agentd run`
instead). The fake Anthropic server answers `watch_verdict`; only the outbox is a recorder."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agentd.config import Config
from agentd.db import Database
from agentd.durable import Engine, FakeClock
from agentd.llm import create_llm
from agentd.tools.fetch import fetch_policy
from agentd.watch import store
from agentd.watch.create import WatchRequest, create, timing
from agentd.watch.sources import SourceDeps
from agentd.watch.workflow import (
    WatchDeps,
    make_legacy_tell_workflow,
    make_tell_workflow,
    make_watch_workflow,
    on_unfinished,
)
from tests.fakes import FakeAnthropic

START = 1_800_000_000.0  # 2027-01-15 08:00 UTC
OWNER = 7


class RecordingOutbox:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def split(self, markdown: str) -> list[str]:
        return [markdown] if markdown.strip() else []  # no length limit here

    async def send_text(self, chat_id: int, markdown: str, **_: Any) -> int:
        self.sent.append((chat_id, markdown))
        return len(self.sent)


def verdict(speak: bool, message: str = "") -> list[dict[str, Any]]:
    answer = {"speak": speak, "message": message, "reason": "rig"}
    return [{"type": "tool_use", "id": "toolu_v", "name": "watch_verdict", "input": answer}]


def responder(decide: Callable[[str], bool], message: str) -> Callable[[dict[str, Any]], Any]:
    """A verdict for each watch request: speak when `decide(the shown text)`."""

    def answer(body: dict[str, Any]) -> Any:
        if (body.get("tool_choice") or {}).get("name") != "watch_verdict":
            return None  # a chat turn: the fake's echo
        text = json.dumps(body["messages"], ensure_ascii=False)
        shown = text.split("<untrusted-source-data>", 1)[-1]
        return verdict(decide(shown), message if decide(shown) else "")

    return answer


class Rig:
    def __init__(
        self,
        db: Database,
        clock: FakeClock,
        config: Config,
        llm: Any,
        env: dict[str, str] | None = None,
    ) -> None:
        self.db, self.clock, self.config, self.llm = db, clock, config, llm
        self.outbox = RecordingOutbox()
        self.engine = Engine(db, clock=clock, poll_interval=0.01, on_finish=self._on_finish)
        self.deps = deps = WatchDeps(
            config=config,
            db=db,
            outbox=self.outbox,
            clock=clock,
            llm=llm,
            sources=SourceDeps(config, db, fetch_policy(config.tools.fetch), env or {}),
            engine=self.engine,
            kick=self.engine.kick,
        )
        self.engine.register(make_watch_workflow(deps))
        self.engine.register(make_tell_workflow(deps))
        self.engine.register(make_legacy_tell_workflow(deps))

    async def _on_finish(self, inst: Any) -> None:
        await on_unfinished(self.deps, inst)  # as the daemon hands the capability its own

    async def add(self, wid: str, **fields: Any) -> store.Watch:
        req = WatchRequest(**fields)
        rec = timing(req, now=self.clock.now(), config=self.config)
        w, _ = await self.db.write(
            lambda c: create(
                c,
                req,
                rec,
                watch_id=wid,
                user_id=OWNER,
                chat_id=OWNER,
                chat_kind="private",
                now=self.clock.now(),
                config=self.config,
                by="test",
            )
        )
        self.engine.kick(store.watch_key(wid))
        return w

    async def advance(self, seconds: float, hop: float = 60.0) -> None:
        """Move time in hops; after each, wait until the engine did all that fell due."""
        await self.engine.settled(60)
        left = seconds
        while left > 0:
            step = min(hop, left)
            self.clock.advance(step)
            left -= step
            await self.engine.settled(60)

    async def outcomes(self, wid: str) -> list[str]:
        found = await self.db.read(store.checks, wid, 100_000)
        return [c.outcome for c in reversed(found)]


def rig_config(
    tmp: Path, llm_url: str, extra: dict[str, Any] | None = None, **watch: Any
) -> Config:
    return Config.model_validate(
        {
            "access": {"allowed_user_ids": [OWNER]},
            "llm": {"base_url": llm_url, "retries": 0},
            "storage": {"path": str(tmp / "agentd.db")},
            "tools": {
                "workspace": {"path": str(tmp / "workspace")},
                "fetch": {"allowed_hosts": ["127.0.0.1"]},
            },
            "schedule": {"on_time_window": 5},
            "watch": {"min_interval": 1, **watch},
            "secrets": {"anthropic_api_key": "sk-ant-rig"},
            **(extra or {}),  # wins: a test's own workspace, mail account, …
        }
    )


@asynccontextmanager
async def watch_rig(
    tmp: Path,
    *,
    env: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    **watch: Any,
) -> AsyncIterator[tuple[Rig, FakeAnthropic]]:
    """`extra`: more config sections (a mail account); `env`: the secrets they name."""
    async with FakeAnthropic.serving() as fake:
        config = rig_config(tmp, fake.base_url, extra, **watch)
        db = await Database.open(config.db_path)
        llm = create_llm(config)
        rig = Rig(db, FakeClock(START), config, llm, env)
        await rig.engine.run()
        try:
            yield rig, fake
        finally:
            await rig.engine.shutdown(1.0)
            await llm.close()
            await db.close()
