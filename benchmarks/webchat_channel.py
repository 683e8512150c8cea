"""The web chat beside Telegram in one daemon: turn latency on each, the page's post
acknowledgment (persist-then-answer), and what the channel costs idle.

One `agentd run` with Telegram (the local Bot API fake), the dashboard and `[webchat]` on, the
same fake model (tests/fakes/) echoing. Turns alternate between the channels; each is timed
from the user's send to the answer reaching the user's side: the fake's record for Telegram,
the page's own event stream (`/chat/events`, read by an HTTP client as the browser reads it)
for the web chat. The post's own time is the page's wait for "taken": the message and its turn
committed (fsync'd) before the answer. Then the daemon idles and its VmRSS is read, beside a
daemon with Telegram and the dashboard but no web chat, measured the same way in the same run
(the baseline), after the same number of turns.

Usage: .venv/bin/python benchmarks/webchat_channel.py [--turns 20] [--idle 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.daemon_process import OWNER, Daemon, daemon_env, running_daemon
from tests.fakes import FakeAnthropic, FakeTelegram

CSRF = re.compile(r'data-csrf="([0-9a-f]+)"')


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def telegram_turn(tg: FakeTelegram, text: str) -> float:
    start = time.perf_counter()
    tg.add_message(OWNER, OWNER, text)
    tg.wait_until(lambda: any(m["plain_text"] == f"echo: {text}" for m in tg.sent), 60, text)
    return time.perf_counter() - start


def login_link(daemon: Daemon, port: int) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "agentd.cli.dashboard", "--link", "--port", str(port)],
        env=daemon.env,
        cwd=daemon.tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


class Page:
    """What the browser does: a session, its CSRF token, the event stream, the posts."""

    def __init__(self, base: str, http: aiohttp.ClientSession) -> None:
        self.base, self.http = base, http
        self.answers: dict[str, float] = {}
        self.csrf = ""

    async def sign_in(self, link: str) -> None:
        token = link.split("t=", 1)[1]
        await self.http.post(f"{self.base}/login", data={"t": token}, headers={"Origin": self.base})
        page = await (await self.http.get(f"{self.base}/chat")).text()
        self.csrf = CSRF.search(page)[1]  # type: ignore[index]

    async def listen(self) -> None:
        async with self.http.get(f"{self.base}/chat/events") as response:
            async for line in response.content:
                if line.startswith(b"data: "):
                    data = json.loads(line[6:])
                    if data.get("role") == "agent":
                        self.answers[data["text"]] = time.perf_counter()

    async def turn(self, text: str) -> tuple[float, float]:
        """(until the post is answered, until the answer is on the stream)."""
        form = aiohttp.FormData({"csrf": self.csrf, "key": secrets.token_hex(16), "text": text})
        start = time.perf_counter()
        response = await self.http.post(
            f"{self.base}/chat/send", data=form, headers={"Origin": self.base}
        )
        assert response.status == 200, await response.text()
        taken = time.perf_counter() - start
        while f"echo: {text}" not in self.answers:
            if time.perf_counter() - start > 60:
                raise TimeoutError(text)
            await asyncio.sleep(0.001)
        return taken, self.answers[f"echo: {text}"] - start


def environment(
    tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, port: int, web: bool
) -> dict[str, str]:
    return daemon_env(
        tmp,
        tg.base_url,
        llm.base_url,
        AGENTD_CHAT__STREAMING="false",
        AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
        AGENTD_DASHBOARD__ENABLED="true",
        AGENTD_DASHBOARD__PORT=str(port),
        AGENTD_WEBCHAT__ENABLED="true" if web else "false",
    )


async def web_side(base: str, link: str, tg: FakeTelegram, turns: int) -> tuple[list, list, list]:
    # unsafe: keep the session cookie of an IP-address host (127.0.0.1), as a browser does
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        page = Page(base, http)
        await page.sign_in(link)
        listening = asyncio.create_task(page.listen())
        await asyncio.sleep(0.5)
        tg_times, posts, web_times = [], [], []
        for i in range(turns):
            tg_times.append(await asyncio.to_thread(telegram_turn, tg, f"tg {i}"))
            taken, answered = await page.turn(f"web {i}")
            posts.append(taken)
            web_times.append(answered)
        listening.cancel()
        return tg_times, posts, web_times


def both(tmp: Path, turns: int, idle: float) -> tuple[list, list, list, int]:
    (tmp / "both").mkdir()
    port = free_port()
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = environment(tmp / "both", tg, llm, port, web=True)
        with running_daemon(tmp / "both", env) as daemon:
            link = login_link(daemon, port)
            found = asyncio.run(web_side(f"http://127.0.0.1:{port}", link, tg, turns))
            time.sleep(idle)
            assert daemon.proc is not None
            return (*found, rss_kb(daemon.proc.pid))


def without_webchat(tmp: Path, turns: int, idle: float) -> int:
    (tmp / "tg").mkdir()
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = environment(tmp / "tg", tg, llm, free_port(), web=False)
        with running_daemon(tmp / "tg", env) as daemon:
            for i in range(turns * 2):  # as many turns as the daemon with both had
                telegram_turn(tg, f"tg {i}")
            time.sleep(idle)
            assert daemon.proc is not None
            return rss_kb(daemon.proc.pid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--turns", type=int, default=20, help="turns on each channel")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before reading RSS")
    args = ap.parse_args()
    print(
        f"Web chat beside Telegram — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load {os.getloadavg()[0]:.2f} at start"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tg_times, posts, web_times, rss_both = both(Path(tmp), args.turns, args.idle)
        rss_tg = without_webchat(Path(tmp), args.turns, args.idle)
    tg50, web50, post50 = (statistics.median(x) for x in (tg_times, web_times, posts))
    print(f"turn p50 Telegram  {tg50 * 1000:7.1f} ms  (min {min(tg_times) * 1000:.1f})")
    print(f"turn p50 web chat  {web50 * 1000:7.1f} ms  (min {min(web_times) * 1000:.1f})")
    print(f"web chat / Telegram {web50 / tg50:.2f}x, {args.turns} alternating turns each")
    print(f"post answered p50  {post50 * 1000:7.1f} ms  (message and turn committed first)")
    print(f"idle RSS, Telegram + dashboard + web chat {rss_both / 1024:6.1f} MB")
    extra = (rss_both - rss_tg) / 1024
    print(f"idle RSS, Telegram + dashboard            {rss_tg / 1024:6.1f} MB  ({extra:+.1f} MB)")
    print(f"load {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
