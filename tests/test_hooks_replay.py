"""A signed webhook body counts once: a replay with another delivery id starts nothing, the
same body at another hook is refused, a stale signed timestamp is refused, starts are
rate-limited, and a hook's secret may come from a systemd credential."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentd.automations.hook_guard import Seen, StartRate, stale_timestamp
from agentd.config import AccessConfig, Config, HookConfig, HooksConfig
from tests.test_hooks import SECRET, hooks_running, post


def sign(body: bytes, stamp: str = "") -> str:
    signed = (stamp.encode() + b"." + body) if stamp else body
    return "sha256=" + hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()


@pytest.fixture
async def sock(tmp_path: Path) -> AsyncIterator[str]:
    path = tmp_path / "hooks.sock"
    routes = {
        "u": HookConfig(workflow="unit_wait", secret_env="UNIT_SECRET", max_starts_per_minute=3),
        "v": HookConfig(workflow="unit_wait", secret_env="CRED_SECRET"),
        "g": HookConfig(workflow="gone", secret_env="UNIT_SECRET", max_starts_per_minute=3),
        "t": HookConfig(
            workflow="unit_wait", secret_env="UNIT_SECRET", timestamp_header="X-Timestamp"
        ),
    }
    config = Config(
        access=AccessConfig(allowed_user_ids=[42]),
        hooks=HooksConfig(enabled=True, listen=f"unix:{path}", routes=routes),
    )
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "cred_secret").write_text(SECRET + "\n")  # a systemd credential, lower case
    env = {"UNIT_SECRET": SECRET, "CREDENTIALS_DIRECTORY": str(creds)}
    async with hooks_running(config, tmp_path / "t.db", env):
        yield str(path)


async def test_a_replay_with_another_delivery_id_starts_nothing(sock: str) -> None:
    body = json.dumps({"x": 1}).encode()
    first = await post(
        sock, "/hooks/u", body, {"X-Signature-256": sign(body), "X-Delivery-Id": "a"}
    )
    again = await post(
        sock, "/hooks/u", body, {"X-Signature-256": sign(body), "X-Delivery-Id": "b"}
    )
    assert first[0] == 202 and first[1]["created"] is True
    assert again == (200, {"instance_id": first[1]["instance_id"], "created": False})


async def test_the_same_body_at_another_hook_is_refused(sock: str) -> None:
    body = json.dumps({"x": 2}).encode()
    assert (await post(sock, "/hooks/u", body, {"X-Signature-256": sign(body)}))[0] == 202
    # "v" reads the same secret from a systemd credential: its signature verifies, the body
    # is still the one "u" took.
    status, said = await post(sock, "/hooks/v", body, {"X-Signature-256": sign(body)})
    assert status == 409 and "another hook" in said["error"]
    other = json.dumps({"x": 3}).encode()
    assert (await post(sock, "/hooks/v", other, {"X-Signature-256": sign(other)}))[0] == 202


async def test_a_stale_or_missing_signed_timestamp_is_refused(sock: str) -> None:
    body = json.dumps({"x": 4}).encode()
    old = str(int(time.time()) - 3600)
    status, said = await post(
        sock, "/hooks/t", body, {"X-Signature-256": sign(body, old), "X-Timestamp": old}
    )
    assert status == 401 and "timestamp" in said["error"]
    assert (await post(sock, "/hooks/t", body, {"X-Signature-256": sign(body)}))[0] == 401
    now = str(int(time.time()))
    unsigned_stamp = await post(
        sock, "/hooks/t", body, {"X-Signature-256": sign(body), "X-Timestamp": now}
    )
    assert unsigned_stamp[0] == 401  # the signature must cover the timestamp
    status, ok = await post(
        sock, "/hooks/t", body, {"X-Signature-256": sign(body, now), "X-Timestamp": now}
    )
    assert status == 202, ok


async def test_starts_are_rate_limited(sock: str) -> None:
    statuses = []
    for n in range(5):
        body = json.dumps({"x": 100 + n}).encode()
        statuses.append((await post(sock, "/hooks/u", body, {"X-Signature-256": sign(body)}))[0])
    assert statuses[:3] == [202, 202, 202] and statuses[3:] == [429, 429]


async def test_a_start_refused_for_its_data_does_not_use_the_rate(sock: str) -> None:
    """Five bodies the workflow refuses (422) at a hook allowing three starts a minute: none
    started anything, so the corrected one is still let through."""
    statuses = []
    for n in range(5):
        body = json.dumps({"x": f"not a number {n}"}).encode()
        statuses.append((await post(sock, "/hooks/u", body, {"X-Signature-256": sign(body)}))[0])
    good = json.dumps({"x": 7}).encode()
    statuses.append((await post(sock, "/hooks/u", good, {"X-Signature-256": sign(good)}))[0])
    assert statuses == [422] * 5 + [202]


async def test_a_start_refused_for_a_missing_automation_does_not_use_the_rate(sock: str) -> None:
    """A hook whose automation is not loaded answers 503 each time, never 429: the refusals
    started nothing, so once the owner loads it the sender's retries get through."""
    statuses = []
    for n in range(5):
        body = json.dumps({"x": 200 + n}).encode()
        statuses.append((await post(sock, "/hooks/g", body, {"X-Signature-256": sign(body)}))[0])
    assert statuses == [503] * 5


async def test_the_guards_alone(tmp_path: Path) -> None:
    from agentd.db import Database

    db = await Database.open(tmp_path / "g.db")
    try:
        seen = Seen(60, db)
        await seen.remember("d", "u", "i", now=1000)
        assert await seen.earlier("d", 1030) == ("u", "i") and await seen.earlier("d", 1061) is None
        rate = StartRate(per_minute=2, db=db)
        allowed = [await rate.allow("u", t) for t in (0, 0, 0, 30, 30, -100)]
        assert allowed == [True, True, False, True, False, False]  # a clock set back: no refill
        assert await StartRate(per_minute=2, db=db).allow("other", 0)  # per hook
    finally:
        await db.close()
    assert stale_timestamp("abc", 0, 300) and stale_timestamp("0", 1000, 300)
    assert stale_timestamp("990", 1000, 300) is None
    # NaN is never "more than max_age away": refused as no time at all, as are infinities.
    assert all(stale_timestamp(v, 1000, 300) for v in ("nan", "NaN", "inf", "-inf"))


async def test_a_restart_does_not_refill_the_start_rate(tmp_path: Path) -> None:
    """A leaked secret used up the minute's starts: the daemon restarting (killed, say) hands
    out none until the bucket refills with time."""
    path = tmp_path / "hooks.sock"
    route = HookConfig(workflow="unit_wait", secret_env="UNIT_SECRET", max_starts_per_minute=2)
    config = Config(
        access=AccessConfig(allowed_user_ids=[42]),
        hooks=HooksConfig(enabled=True, listen=f"unix:{path}", routes={"u": route}),
    )
    clock = [time.time()]
    env = {"UNIT_SECRET": SECRET}

    async def start(n: int) -> int:
        body = json.dumps({"x": 900 + n}).encode()
        return (await post(str(path), "/hooks/u", body, {"X-Signature-256": sign(body)}))[0]

    async with hooks_running(config, tmp_path / "t.db", env, now=lambda: clock[0]):
        assert [await start(n) for n in range(3)] == [202, 202, 429]
    async with hooks_running(config, tmp_path / "t.db", env, now=lambda: clock[0]):
        assert await start(3) == 429
        clock[0] += 30  # half a minute: one start back
        assert [await start(n) for n in (4, 5)] == [202, 429]


async def test_a_replay_after_a_restart_and_past_a_window_boundary_starts_nothing(
    tmp_path: Path,
) -> None:
    """Accepted bodies are remembered in the database with their age: a replay two seconds
    later is refused even across a restart and into the next calendar window, and is taken
    again only once the sender's window has passed."""
    path = tmp_path / "hooks.sock"
    route = HookConfig(workflow="unit_wait", secret_env="UNIT_SECRET", replay_window_seconds=60)
    config = Config(
        access=AccessConfig(allowed_user_ids=[42]),
        hooks=HooksConfig(enabled=True, listen=f"unix:{path}", routes={"u": route}),
    )
    clock = [(time.time() // 60 + 1) * 60 - 1]  # one second before a window boundary
    env = {"UNIT_SECRET": SECRET}
    body = json.dumps({"x": 7}).encode()
    signed = {"X-Signature-256": sign(body)}
    async with hooks_running(config, tmp_path / "t.db", env, now=lambda: clock[0]):
        first = await post(str(path), "/hooks/u", body, signed)
    assert first[0] == 202
    clock[0] += 2  # the next calendar window, two seconds later, after a restart
    async with hooks_running(config, tmp_path / "t.db", env, now=lambda: clock[0]):
        again = await post(str(path), "/hooks/u", body, signed)
        assert again == (200, {"instance_id": first[1]["instance_id"], "created": False})
        clock[0] += 60  # the sender's window has passed: a new delivery of the same body
        later = await post(str(path), "/hooks/u", body, signed)
        assert later[0] == 202 and later[1]["instance_id"] != first[1]["instance_id"]
