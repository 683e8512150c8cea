"""Turns per second and latency through the whole daemon path.

`agentd run` runs as a subprocess (tests/daemon_process.py) against the local fakes of the
Telegram Bot API and the Anthropic Messages API (tests/fakes/), which run in this process and
answer at once (the LLM fake says "echo: <text>"). A turn is: getUpdates → commit update + turn
→ workflow (save user message, load history, LLM call, sendMessage, save reply, audit) → the
fake records the sendMessage. Latency = time the reply reached the fake − time the message was
added to the fake (same clock: both are time.time() in this process).

Phases, all after the daemon logged "agentd running" and one warm-up turn per chat:

  sequential  one message at a time: the next is added only after the previous turn's
              workflow is complete in the database (its reply comes before save-reply and
              audit, so waiting for the reply alone would overlap turns): unloaded latency
  burst       --messages added at once, round-robin across --chats private chats: turns/s
              (messages / time from the first add to the last reply) and latency under load

The sequential phase's breakdown comes from the journal (each step's start and end as the
engine recorded them, whatever the log level). By default the daemon uses the hashing embedder
here (as the tests do), so recall costs a keyword and a vector lookup but no model; --embedder
e5-small runs the product's default (the query embedding is measured on its own by
benchmarks/memory_embedder.py and memory_scale.py).

The fake long poll returns as soon as an update is added, and the daemon's poll timeout is 1 s
(AGENTD_TELEGRAM__POLL_TIMEOUT from tests.daemon_process.daemon_env), so no phase waits out a
poll.

--fsync-delay-ms N runs the daemon under strace, which delays every fsync/fdatasync by N ms
(an SD card; as in turn_fsyncs.py); --count-fsyncs counts them (strace -c); --source DIR runs
another checkout's agentd (e.g. an export of main) with this script and these fakes, so two
versions can be compared in one session.

Usage: .venv/bin/python benchmarks/daemon_throughput.py [--messages 200] [--chats 4]
       [--sequential 30] [--gap 0] [--concurrency 8] [--log-level INFO] [--keep]
       [--fsync-delay-ms 0] [--count-fsyncs] [--source DIR] [--embedder hashing]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turn_fsyncs import TracedDaemon, slow_disk

from agentd.db.connect import open_sync
from tests.daemon_process import REPO_ROOT, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram, tool_use_reply

TOKEN_RE = re.compile(r"\bm-(\d+)-(\d+)\b")
TICK = os.sysconf("SC_CLK_TCK")


def daemon_pid(daemon: TracedDaemon) -> int:
    """The agentd process (under strace, the tracer's child)."""
    assert daemon.proc is not None
    pid = daemon.proc.pid
    if not daemon.prefix:
        return pid
    return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])


def fsync_calls(summary: Path) -> int:
    """The calls counted in an `strace -c` summary (its "total" line)."""
    for line in summary.read_text().splitlines():
        if line.rstrip().endswith("total"):
            return int(line.split()[-2])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def breakdown(daemon: TracedDaemon, added: dict[str, float]) -> list[str]:
    """Medians from the journal (full-resolution times, whatever the daemon's log level) for the
    given instances (id → add time). A step's time runs from its attempt's start to when its
    result was recorded, so the commit of that result falls in the gap after it."""
    marks = ",".join("?" * len(added))
    rows = daemon.query(
        f"SELECT s.instance_id, s.name, s.started_at, s.finished_at, i.finished_at "
        f"FROM workflow_steps s JOIN workflow_instances i ON i.id = s.instance_id "
        f"WHERE s.instance_id IN ({marks}) ORDER BY s.instance_id, s.ordinal",
        tuple(added),
    )
    first: dict[str, float] = {}
    done: dict[str, float] = {}
    steps: dict[str, list[float]] = {}
    for iid, name, started, finished, completed in rows:
        first.setdefault(iid, started)
        done[iid] = completed
        steps.setdefault(re.sub(r"#\d+$", "", name), []).append((finished - started) * 1000)
    if not done:
        return ["  (no journaled steps found for these turns)"]
    intake = [(first[i] - added[i]) * 1000 for i in first]
    run = [(done[i] - first[i]) * 1000 for i in first]
    lines = [
        f"  message added → first step       p50 {pct(intake, 0.5):6.1f} ms",
        f"  first step → workflow complete   p50 {pct(run, 0.5):6.1f} ms",
    ]
    for name, values in steps.items():
        lines.append(f"    step {name:<26}  p50 {pct(values, 0.5):6.1f} ms  (n={len(values)})")
    return lines


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Tracker:
    """Messages added to the fake, and the replies matched to them by their unique token."""

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg
        self.added: dict[str, float] = {}
        self.instance: dict[str, str] = {}
        self.seen: dict[str, float] = {}
        self.scanned = 0
        self.seq = 0

    def send(self, chat: int) -> str:
        self.seq += 1
        token = f"m-{chat}-{self.seq}"
        self.added[token] = time.time()
        update_id = self.tg.add_message(chat, chat, f"benchmark message {token}")
        self.instance[token] = f"tg-update-{update_id}"
        return token

    def by_instance(self, tokens: list[str]) -> dict[str, float]:
        return {self.instance[t]: self.added[t] for t in tokens}

    def _scan(self) -> None:
        # Reads the fake's record list under its lock, only the entries not seen yet: the public
        # `tg.sent` deep-copies everything on every call, which under the fake's lock would slow
        # the fake itself (O(n²) over a burst) and skew the figures.
        for sent in self.tg._sent[self.scanned :]:
            found = TOKEN_RE.search(sent.get("plain_text") or sent.get("text") or "")
            if found:
                self.seen.setdefault(found.group(0), sent["time"])
        self.scanned = len(self.tg._sent)

    def wait(self, tokens: list[str], timeout: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        with self.tg._cond:
            while True:
                self._scan()
                missing = [t for t in tokens if t not in self.seen]
                if not missing:
                    return dict(self.seen)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SystemExit(
                        f"only {len(tokens) - len(missing)}/{len(tokens)} replies after "
                        f"{timeout}s; missing e.g. {missing[:5]}"
                    )
                self.tg._cond.wait(min(remaining, 0.5))


def responder(body: dict[str, Any]) -> Any:
    """Echo (the fake's default), but answer a forced tool call the way the tool asks, so the
    background summaries a long chat starts (`record_summary`) succeed as they would live."""
    choice = body.get("tool_choice") or {}
    if choice.get("type") == "tool" and choice.get("name") == "record_summary":
        return tool_use_reply(
            "record_summary", {"summary": "A benchmark chat.", "facts": [], "retract_keys": []}
        )
    return None


def wait_complete(reader: Any, instance_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    sql = "SELECT status FROM workflow_instances WHERE id = ?"
    while (row := reader.execute(sql, (instance_id,)).fetchone()) is None or row[0] != "complete":
        if time.monotonic() > deadline:
            raise SystemExit(f"{instance_id} not complete after {timeout}s: {row and row[0]}")
        time.sleep(0.002)


def host_speed_ms() -> float:
    """How long a fixed pure-Python workload takes now, median of 5 (lower is a faster host).

    Taken before the burst and after every turn is complete, it says how steady the host was
    (a VM's speed here wandered 2x within a series); too coarse to normalise a run by."""
    messages = [{"role": "user", "content": "benchmark " * 8, "n": i} for i in range(200)]
    payload = {"messages": messages}
    times = []
    for _ in range(5):
        started = time.perf_counter()
        counts: dict[str, int] = {}
        for i in range(20_000):
            key = f"k{i % 500}"
            counts[key] = counts.get(key, 0) + i
        for _ in range(10):
            json.loads(json.dumps(payload))
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def latency_line(name: str, lat_ms: list[float]) -> str:
    return (
        f"  {name:<10} n={len(lat_ms):<4} p50 {pct(lat_ms, 0.5):7.1f} ms   "
        f"p95 {pct(lat_ms, 0.95):7.1f} ms   max {max(lat_ms):7.1f} ms   "
        f"mean {statistics.fmean(lat_ms):7.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=200, help="messages in the burst")
    ap.add_argument("--chats", type=int, default=4, help="private chats (distinct users)")
    ap.add_argument("--sequential", type=int, default=30, help="messages sent one at a time")
    ap.add_argument("--gap", type=float, default=0.0, help="pause between sequential turns (s)")
    ap.add_argument("--concurrency", type=int, default=8, help="engine.concurrency")
    ap.add_argument("--log-level", default="INFO", help="the daemon's log level (default INFO)")
    ap.add_argument("--timeout", type=float, default=120.0, help="give up after this long")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (DB and logs)")
    ap.add_argument("--fsync-delay-ms", type=int, default=0, help="strace delay per fsync")
    ap.add_argument("--count-fsyncs", action="store_true", help="count fsyncs (strace -c)")
    ap.add_argument("--source", type=Path, default=REPO_ROOT, help="the agentd checkout to run")
    ap.add_argument("--embedder", default="hashing", help="memory.embedder (e5-small: default)")
    args = ap.parse_args()

    chats = [1000 + i for i in range(args.chats)]
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-daemon-"))
    print(
        f"agentd daemon throughput — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} at start, dir {tmp}, agentd from {args.source}, "
        f"embedder {args.embedder}"
        + (f", +{args.fsync_delay_ms} ms per fsync" if args.fsync_delay_ms else "")
    )
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            llm.set_responder(responder)
            env = daemon_env(
                tmp,
                tg.base_url,
                llm.base_url,
                AGENTD_ACCESS__ALLOWED_USER_IDS=str(chats),
                AGENTD_ENGINE__CONCURRENCY=str(args.concurrency),
                AGENTD_LOG__LEVEL=args.log_level,
                # On, as by default (its check is part of every turn), but too high to refuse.
                AGENTD_LIMITS__MESSAGES_PER_MINUTE="1000000",
                PYTHONPATH=f"{args.source}{os.pathsep}{REPO_ROOT}",
                AGENTD_MEMORY__EMBEDDER=args.embedder,
            )
            summary = tmp / "fsyncs.txt" if args.count_fsyncs else None
            traced = args.fsync_delay_ms or args.count_fsyncs
            prefix = slow_disk(args.fsync_delay_ms, summary) if traced else []
            daemon = TracedDaemon(tmp, env, prefix)
            t = time.perf_counter()
            daemon.start(timeout=60)
            pid = daemon_pid(daemon)
            print(f"daemon ready in {time.perf_counter() - t:.2f} s (pid {pid})")
            try:
                track = Tracker(tg)
                # Warm-up: one turn per chat (HTTP connections, lazy imports, caches).
                track.wait([track.send(c) for c in chats], args.timeout)

                seq_lat, seq_tokens = [], []
                reader = open_sync(daemon.db_path, readonly=True)
                for i in range(args.sequential):
                    token = track.send(chats[i % len(chats)])
                    got = track.wait([token], args.timeout)
                    seq_lat.append((got[token] - track.added[token]) * 1000)
                    seq_tokens.append(token)
                    wait_complete(reader, track.instance[token], args.timeout)
                    time.sleep(args.gap)
                reader.close()

                probe_before = host_speed_ms()
                cpu_before = cpu_seconds(pid)
                fakes_before = time.process_time()
                first = time.time()
                tokens = [track.send(chats[i % len(chats)]) for i in range(args.messages)]
                added_in = time.time() - first
                got = track.wait(tokens, args.timeout)
                last = max(got[t] for t in tokens)
                burst_lat = [(got[t] - track.added[t]) * 1000 for t in tokens]
                elapsed = last - first
                burst_cpu = cpu_seconds(pid) - cpu_before
                fakes_cpu = time.process_time() - fakes_before
                # Replies go out before save-reply and audit: let the last turns finish too.
                reader = open_sync(daemon.db_path, readonly=True)
                for token in tokens:
                    wait_complete(reader, track.instance[token], args.timeout)
                reader.close()
                all_done = time.time() - first
                probe_after = host_speed_ms()

                llm_calls = len(llm.requests)
                sends = len(tg.sent)
                rc = daemon.stop()
            finally:
                daemon.kill()
            turns = daemon.query(
                "SELECT COUNT(*) FROM workflow_instances WHERE status = 'complete' "
                "AND workflow = 'turn'"
            )[0][0]
            steps = daemon.query(
                "SELECT COUNT(*) FROM workflow_steps s JOIN workflow_instances i "
                "ON i.id = s.instance_id WHERE i.workflow = 'turn'"
            )[0][0]
            others = daemon.query(
                "SELECT workflow || ' ' || status, COUNT(*) FROM workflow_instances "
                "WHERE workflow != 'turn' GROUP BY 1"
            )
            sent = tg.sent
            dup = len(sent) - len({(s["chat_id"], s["message_id"]) for s in sent})
            echoes = sum(1 for s in sent if (s.get("plain_text") or "").startswith("echo: "))
            fsyncs = fsync_calls(summary) if summary else None

        total = len(chats) + args.sequential + args.messages
        if seq_lat:
            print(
                f"\nsequential ({args.sequential} turns, one at a time, round-robin over "
                f"{len(chats)} chats):"
            )
            print(latency_line("latency", seq_lat))
            print(f"  → {1000 / statistics.fmean(seq_lat):.1f} turns/s when turns do not overlap")
            print("  where the time goes (the journal, sequential turns):")
            print("\n".join(breakdown(daemon, track.by_instance(seq_tokens))))
        print(
            f"\nburst ({args.messages} messages over {len(chats)} chats, added in "
            f"{added_in * 1000:.0f} ms; engine.concurrency {args.concurrency}):"
        )
        print(
            f"  throughput {args.messages / elapsed:.1f} turns/s ({elapsed:.2f} s to the last "
            f"reply, {all_done:.2f} s until every turn's workflow was complete)"
        )
        print(latency_line("latency", burst_lat))
        print(
            f"  daemon CPU during the burst: {burst_cpu:.2f} s = "
            f"{burst_cpu / args.messages * 1000:.1f} ms per turn, "
            f"{burst_cpu / elapsed * 100:.0f}% of one core"
        )
        print(
            f"  host speed probe (a fixed Python workload, lower is faster): "
            f"{probe_before:.1f} ms before the burst, {probe_after:.1f} ms after"
        )
        print(
            f"  the fakes and this harness (one process) meanwhile: {fakes_cpu:.2f} s = "
            f"{fakes_cpu / args.messages * 1000:.1f} ms per turn, "
            f"{fakes_cpu / elapsed * 100:.0f}% of one core"
        )
        print(
            f"\nchecks: {turns}/{total} turns complete, {sends} replies sent ({echoes} are the "
            f"fake's echo), {llm_calls} LLM calls, {steps / max(turns, 1):.1f} journaled steps "
            f"per turn, exit code {rc} on SIGTERM, {dup} duplicate (chat, message id)"
        )
        if fsyncs is not None:
            print(
                f"  fsync + fdatasync calls over the whole run: {fsyncs} = "
                f"{fsyncs / total:.2f} per turn (start-up included)"
            )
        if others:
            print(
                "  other workflows the turns started: "
                + ", ".join(f"{n} {name}" for name, n in others)
            )
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
