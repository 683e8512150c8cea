"""What the browser costs, through `agentd run` against the local fakes and a local site:

- time and tokens to answer from a JavaScript-only page with `browser_open`, against
  `fetch_url` on its server-rendered twin (and `fetch_url` on the JavaScript-only page itself,
  which reads no answer at all);
- the browser's start time (the daemon's own "browser started" log line) and its memory: the
  Pss of the sandboxed tree (pasta, bwrap, Chromium's processes) and of Playwright's driver;
- the idle cost of an enabled browser nobody used: child processes and the daemon's RSS,
  beside a daemon with the browser off (same run).

A turn is timed from the message handed to the fake Telegram to the reply it receives; the
fake model answers at once (its text is fixed), so the time is agentd's and the browser's.
Tokens are the fake's count (about four characters a token) of the model call that read the
tool's result, from `llm_usage`: the page as the model receives it.

Usage: .venv/bin/python benchmarks/browser_cost.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.browser.jail import tree_rss
from tests.browser_sites import PRICE, sites
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram


def _config(port: int, enabled: bool) -> str:
    return (
        "[memory]\nhistory_limit = 0\n\n[limits]\nmessages_per_minute = 0\n\n"
        f'[tools.fetch]\nallowed_hosts = ["127.0.0.1"]\n\n'
        f"[browser]\nenabled = {'true' if enabled else 'false'}\n"
        f'allowed_hosts = ["127.0.0.1:{port}"]\n'
    )


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _turn(tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon, tool: str, url: str, n: int) -> Any:
    llm.reset()
    llm.enqueue_tool_use(tool, {"url": url}, f"bench_{n}")
    llm.enqueue_text(f"answer {n}")
    started = time.monotonic()
    tg.add_message(OWNER, OWNER, f"read {url} please ({n})")
    tg.wait_until(
        lambda: any(m["plain_text"] == f"answer {n}" for m in tg.sent), 120, f"answer {n}"
    )
    took = time.monotonic() - started
    body = llm.requests[-1]["body"]
    blocks = [b for b in body["messages"][-1]["content"] if b.get("tool_use_id") == f"bench_{n}"]
    inner = blocks[0]["content"]
    result = inner if isinstance(inner, str) else " ".join(b.get("text", "") for b in inner)
    rows = daemon.query(
        "SELECT input_tokens + cache_read_tokens + cache_write_tokens FROM llm_usage "
        "ORDER BY id DESC LIMIT 1"
    )
    return took, int(rows[0][0]), PRICE in result, len(result)


def _idle(tmp: Path, port: int, enabled: bool) -> tuple[int, int]:
    folder = Path(tempfile.mkdtemp(dir=tmp))
    (folder / "agentd.toml").write_text(_config(port, enabled))
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        env = daemon_env(
            folder, tg.base_url, llm.base_url, AGENTD_CONFIG=str(folder / "agentd.toml")
        )
        daemon = Daemon(folder, env).start()
        try:
            tg.add_message(OWNER, OWNER, "hello")
            tg.wait_until(
                lambda: any(m["plain_text"] == "echo: hello" for m in tg.sent), 60, "echo"
            )
            assert daemon.proc is not None
            return len(_children(daemon.proc.pid)), _rss(daemon.proc.pid)
        finally:
            daemon.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    print(f"load average: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as raw, sites() as (site, _):
        tmp = Path(raw)
        off = _idle(tmp, site.port, False)
        idle = _idle(tmp, site.port, True)
        for label, (children, rss) in (("browser off", off), ("browser on, unused", idle)):
            print(f"idle, {label:20} {children} child processes, daemon RSS {rss >> 20} MB")
        folder = tmp / "run"
        folder.mkdir()
        (folder / "agentd.toml").write_text(_config(site.port, True))
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            env = daemon_env(
                folder, tg.base_url, llm.base_url, AGENTD_CONFIG=str(folder / "agentd.toml")
            )
            daemon = Daemon(folder, env).start()
            try:
                _report(tg, llm, daemon, site.base, rounds)
            finally:
                daemon.stop()


def _report(tg: FakeTelegram, llm: FakeAnthropic, daemon: Daemon, base: str, rounds: int) -> None:
    assert daemon.proc is not None
    before = _rss(daemon.proc.pid)
    cold = _turn(tg, llm, daemon, "browser_open", f"{base}/js", 0)
    started = (
        next(line for line in daemon.log().splitlines() if '"browser started"' in line)
        .split('"seconds": ')[1]
        .split("}")[0]
    )
    # Playwright's driver is the daemon's child; the sandboxed tree hangs below it.
    drivers = _children(daemon.proc.pid)
    tree = sum(tree_rss(root) for d in drivers for root in _children(d))
    driver = sum(tree_rss(d) for d in drivers) - tree
    print(
        f"browser start (log): {float(started):.2f} s; first turn with it {cold[0] * 1000:.0f} ms"
    )
    print(
        f"sandboxed tree Pss {tree >> 20} MB; Playwright driver Pss {driver >> 20} MB; "
        f"daemon RSS {before >> 20} -> {_rss(daemon.proc.pid) >> 20} MB"
    )
    runs: dict[str, list[Any]] = {"browser /js": [], "fetch_url /ssr": [], "fetch_url /js": []}
    n = 1
    for _ in range(rounds):  # alternating, so a slow phase of the host hits all three
        for label, tool, path in (
            ("browser /js", "browser_open", "/js"),
            ("fetch_url /ssr", "fetch_url", "/ssr"),
            ("fetch_url /js", "fetch_url", "/js"),
        ):
            runs[label].append(_turn(tg, llm, daemon, tool, f"{base}{path}", n))
            n += 1
    head = ("turn", "median ms", "input tokens", "result tokens", "answer found")
    print(f"\n{head[0]:16} {head[1]:>10} {head[2]:>13} {head[3]:>14} {head[4]:>13}")
    for label, got in runs.items():
        ms = statistics.median(r[0] for r in got) * 1000
        found = str(all(r[2] for r in got))
        print(f"{label:16} {ms:10.0f} {got[-1][1]:13d} {(got[-1][3] + 3) // 4:14d} {found:>13}")


if __name__ == "__main__":
    main()
