"""Event-loop lag while hostile HTML is read, beside a benign page, in one run.

Part 1, in this process: the daemon's own fetch path (`agentd.net.safe_fetch.fetch`: HTTP,
then HTML to text in a bounded child) against a local site, with a 10 ms ticker on the same
event loop recording the largest delay any tick saw (the loop's lag). Baseline in the same
run: the stdlib `html.parser` that agentd used before, fed on the loop as it was, on the
largest hostile page it gets through in seconds (30 KB of `<a `).

Part 2, through `agentd run` and the fakes: the owner's turn fetches the page while another
chat sends a message; printed is how long that other chat waited for its answer.

    .venv/bin/python benchmarks/hostile_html.py [--skip-daemon]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.net.safe_fetch import fetch
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.fakes.site import FakeSite

OTHER = 43
ARTICLE = "<h2>Section</h2><p>" + "A benign paragraph of text, with a <a href=/x>link</a>. " * 20
PAGES: dict[str, bytes] = {
    "benign (180 KB article)": ("<title>t</title>" + ARTICLE * 150).encode(),
    "hostile: 2 MB of `<a `": b"<p>x</p>" + b"<a " * 650_000,
    "hostile: 300 000 nested <div>": b"<div>" * 300_000 + b"end",
}


async def with_lag(work: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(seconds the work took, the largest event-loop lag a 10 ms ticker saw meanwhile)."""
    worst = 0.0
    running = True

    async def tick() -> None:
        nonlocal worst
        while running:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - before - 0.01)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    try:
        await work()
    finally:
        took = time.perf_counter() - started
        running = False
        await ticker
    return took, worst


async def in_process() -> None:
    async with FakeSite.serving() as site:
        policy = site.policy(timeout=60.0)
        print(f"{'page':40} {'took s':>8} {'max loop lag s':>15}")
        for n, (name, body) in enumerate(PAGES.items()):
            url = site.raw(f"/p{n}", body, "text/html")
            took, lag = await with_lag(lambda url=url: fetch(url, policy))
            print(f"{name:40} {took:8.2f} {lag:15.3f}")
        hostile = "<a " * 10_000

        async def old_parser() -> None:
            await fetch(site.raw("/old", b"", "text/html"), policy)  # the HTTP part, then
            old = HTMLParser(convert_charrefs=True)  # the parse as agentd did it, on the loop
            old.feed(hostile)
            old.close()

        took, lag = await with_lag(old_parser)
        print(f"{'baseline: html.parser on loop, 30 KB `<a `':40} {took:8.2f} {lag:15.3f}")


def owner_reads(url: str, n: int, body: dict[str, Any]) -> Any:
    """The model: the owner's message fetches the page, then answers; others get an echo."""
    last = body["messages"][-1]["content"]
    if f"read {url}" not in str(body["messages"]):
        return None
    if "tool_result" in str(last):
        return f"read {n}"
    return [{"type": "tool_use", "id": f"toolu_b{n}", "name": "fetch_url", "input": {"url": url}}]


def daemon_wait(tmp: Path) -> None:
    """How long another chat waits for its answer while the owner's turn reads each page."""
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm, FakeSite.running() as site:
        (tmp / "agentd.toml").write_text('[tools.fetch]\nallowed_hosts = ["127.0.0.1"]\n')
        env = daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp / "agentd.toml"))
        daemon = Daemon(tmp, env).start()
        try:
            print(f"\n{'page the owner fetches':40} {'other chat waited s':>20} {'owner s':>8}")
            for n, (name, body) in enumerate(PAGES.items()):
                url = site.raw(f"/d{n}", body, "text/html")
                llm.set_responder(partial(owner_reads, url, n))
                started = time.perf_counter()
                tg.add_message(OWNER, OWNER, f"read {url}")
                tg.wait_until(lambda n=n: f"/d{n}" in site.requests, 60, "the fetch")
                sent = len(tg.sent)
                asked = time.perf_counter()
                tg.add_message(OTHER, OTHER, f"ping {n}")
                tg.wait_until(
                    lambda sent=sent: any(m["chat_id"] == OTHER for m in tg.sent[sent:]),
                    300,
                    "the answer",
                )
                waited = time.perf_counter() - asked
                tg.wait_until(
                    lambda n=n: any(m["plain_text"] == f"read {n}" for m in tg.sent),
                    300,
                    "the owner's answer",
                )
                print(f"{name:40} {waited:20.2f} {time.perf_counter() - started:8.2f}")
        finally:
            daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-daemon", action="store_true", help="part 1 only")
    args = parser.parse_args()
    asyncio.run(in_process())
    if not args.skip_daemon:
        with tempfile.TemporaryDirectory() as tmp:
            daemon_wait(Path(tmp))


if __name__ == "__main__":
    main()
