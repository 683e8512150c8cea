"""Matrix beside Telegram in one daemon: turn latency on each, and what Matrix costs idle.

One `agentd run` with both channels on: Telegram against the local Bot API fake, Matrix
against a real Synapse (tests/matrixserver.py, SQLite, loopback), the same fake model
(tests/fakes/) echoing. Turns alternate between the channels; each is timed from the user's
send to the answer reaching the user's side: the fake's record for Telegram, the owner's own
/sync long poll for Matrix (it returns the moment Synapse has the bot's event). Then the
daemon idles and its VmRSS is read, beside a Telegram-only daemon measured the same way in the
same run (the baseline), after the same number of turns. First it counts, from the source, the
files Matrix touches outside its own package (tests/channel_files.py, the check
tests/test_channel_own.py holds to "its package plus one list entry").

Usage: .venv/bin/python benchmarks/matrix_channel.py [--turns 20] [--idle 5] [--files-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.channel_files import every_channel
from tests.daemon_process import OWNER, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.matrix_rig import MatrixRig, matrix_rig
from tests.matrixserver import MatrixUser, cast_running, http


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def telegram_turn(tg: FakeTelegram, text: str) -> float:
    start = time.perf_counter()
    tg.add_message(OWNER, OWNER, text)
    tg.wait_until(lambda: any(m["plain_text"] == f"echo: {text}" for m in tg.sent), 60, text)
    return time.perf_counter() - start


def _sync(user: MatrixUser, since: str | None, timeout_ms: int) -> dict[str, Any]:
    query = f"?timeout={timeout_ms}" + (f"&since={since}" if since else "")
    url = f"{user.server.url}/_matrix/client/v3/sync{query}"
    status, body = http("GET", url, headers=user.auth, timeout=timeout_ms / 1000 + 10)
    assert status == 200, body
    return dict(json.loads(body))


def matrix_turn(rig: MatrixRig, room: str, text: str, since: str) -> tuple[float, str]:
    """Send as the owner; wait on the owner's /sync for the bot's answer."""
    start = time.perf_counter()
    rig.owner.say(room, text)
    while True:
        answer = _sync(rig.owner, since, 30_000)
        since = answer["next_batch"]
        events = ((answer.get("rooms") or {}).get("join") or {}).get(room, {})
        for event in (events.get("timeline") or {}).get("events") or []:
            body = (event.get("content") or {}).get("body")
            if event.get("sender") == rig.bot and body == f"echo: {text}":
                return time.perf_counter() - start, since
        if time.perf_counter() - start > 60:
            raise TimeoutError(text)


def echo_floor(cast: Any, turns: int) -> list[float]:
    """The homeserver's own share: the owner's message answered by a plain HTTP client that
    syncs and replies at once (two events and two sync wake-ups, no agentd)."""
    import threading

    echo, stop = cast.stranger, threading.Event()
    room = cast.owner.create_room(invite=[echo.user_id])
    echo.join(room)

    def run() -> None:
        since = _sync(echo, None, 0)["next_batch"]
        while not stop.is_set():
            answer = _sync(echo, since, 1000)
            since = answer["next_batch"]
            joined = ((answer.get("rooms") or {}).get("join") or {}).get(room, {})
            for event in (joined.get("timeline") or {}).get("events") or []:
                body = (event.get("content") or {}).get("body", "")
                if event.get("sender") == cast.owner.user_id:
                    echo.say(room, f"echo: {body}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(1)
    since = _sync(cast.owner, None, 0)["next_batch"]
    times = []
    for i in range(turns):
        start = time.perf_counter()
        cast.owner.say(room, f"floor {i}")
        done = False
        while not done:
            answer = _sync(cast.owner, since, 30_000)
            since = answer["next_batch"]
            joined = ((answer.get("rooms") or {}).get("join") or {}).get(room, {})
            done = any(
                (e.get("content") or {}).get("body") == f"echo: floor {i}"
                for e in (joined.get("timeline") or {}).get("events") or []
            )
        times.append(time.perf_counter() - start)
    stop.set()
    thread.join(5)
    return times


def both(tmp: Path, turns: int, idle: float) -> tuple[list[float], list[float], list[float], int]:
    with cast_running(tmp / "synapse") as cast:
        (tmp / "both").mkdir()
        # The owner writes on both channels as one agentd user: one rate limit, lifted here.
        with matrix_rig(
            tmp / "both", cast, direct=True, AGENTD_LIMITS__MESSAGES_PER_MINUTE="0"
        ) as rig:
            room = rig.dm()
            since = _sync(rig.owner, None, 0)["next_batch"]
            tg_times, mx_times = [], []
            for i in range(turns):
                tg_times.append(telegram_turn(rig.tg, f"tg {i}"))
                took, since = matrix_turn(rig, room, f"mx {i}", since)
                mx_times.append(took)
            time.sleep(idle)
            assert rig.daemon.proc is not None
            rss = rss_kb(rig.daemon.proc.pid)
        return tg_times, mx_times, echo_floor(cast, turns), rss


def telegram_only(tmp: Path, turns: int, idle: float) -> int:
    (tmp / "tg").mkdir()
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            tmp / "tg",
            tg.base_url,
            llm.base_url,
            AGENTD_CHAT__STREAMING="false",
            AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
        )
        with running_daemon(tmp / "tg", env) as daemon:
            for i in range(turns * 2):  # as many turns as the daemon with both had
                telegram_turn(tg, f"tg {i}")
            time.sleep(idle)
            assert daemon.proc is not None
            return rss_kb(daemon.proc.pid)


def files_touched() -> None:
    """What each channel touches outside its package: code, then checked docs, then its extra."""
    for t in every_channel():
        extra = " + its pyproject extra" if t.extra else ""
        code, docs = ", ".join(t.code), ", ".join(t.docs)
        print(
            f"files outside agentd/{t.name}/: {t.files} — code {len(t.code)} ({code}), "
            f"checked docs {len(t.docs)} ({docs}){extra}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--turns", type=int, default=20, help="turns on each channel")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before reading RSS")
    ap.add_argument("--files-only", action="store_true", help="only count the files touched")
    args = ap.parse_args()
    files_touched()
    if args.files_only:
        return
    print(
        f"Matrix beside Telegram — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load {os.getloadavg()[0]:.2f} at start"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tg_times, mx_times, floor, rss_both = both(Path(tmp), args.turns, args.idle)
        rss_tg = telegram_only(Path(tmp), args.turns, args.idle)
    tg50, mx50 = statistics.median(tg_times), statistics.median(mx_times)
    print(f"turn p50 Telegram {tg50 * 1000:7.1f} ms  (min {min(tg_times) * 1000:.1f})")
    print(f"turn p50 Matrix   {mx50 * 1000:7.1f} ms  (min {min(mx_times) * 1000:.1f})")
    print(f"Matrix / Telegram {mx50 / tg50:.2f}x, {args.turns} alternating turns each")
    f50 = statistics.median(floor)
    print(f"homeserver floor  {f50 * 1000:7.1f} ms  (a plain client echoing through Synapse)")
    print(f"agentd on Matrix beyond the floor {(mx50 - f50) * 1000:.1f} ms")
    print(f"idle RSS, Telegram + Matrix  {rss_both / 1024:6.1f} MB")
    extra = (rss_both - rss_tg) / 1024
    print(f"idle RSS, Telegram only      {rss_tg / 1024:6.1f} MB  (Matrix adds {extra:+.1f} MB)")
    print(f"load {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
