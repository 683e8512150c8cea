"""Commits and fsyncs per turn, counted from the daemon's real system calls, beside latency.

`agentd run` runs as a subprocess (tests/daemon_process.py) against the local fakes, under
`strace -f --seccomp-bpf`. Four kinds of turn, each sent one at a time (the next only once the
previous workflow is complete in the database):

  text      a plain message; the fake LLM answers with text at once
  photo     a photo with a caption: the image is fetched and summarised (vision), then answered
  tool      the LLM calls a low-risk tool (count_words), then answers
  approval  the LLM calls a high-risk tool (delete_file); this script presses Approve on the
            request as soon as it arrives; the tool runs; the LLM answers

Counting (pass "count"): every fdatasync/fsync of the daemon is an fsync; every 24-byte
pwrite64 to the -wal file whose bytes 4..7 (the frame's "database size after commit") are not
zero is a commit frame, i.e. one committed transaction (SQLite's WAL format). strace's -ttt
timestamps put each call into the window of the turn that was running (message added → its
workflow complete), so background work between turns is not counted.

Latency (message added → the last reply reached the fake Telegram) is measured in pass "plain"
(no strace at all) and pass "slow" (strace injects a 10 ms delay after every fsync: an SD card
or a slow network disk). With --compare DIR, the same passes run the daemon from another
checkout (e.g. /work/main: PYTHONPATH points there), in the same run.

Usage: .venv/bin/python benchmarks/turn_fsyncs.py [--turns 10] [--delay-ms 10]
       [--compare /path/to/other/checkout] [--passes count,plain,slow]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PIL import Image

from agentd.db.connect import open_sync
from tests.daemon_process import AGENTD, REPO_ROOT, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram, tool_use_reply

STRACE = shutil.which("strace") or "/usr/bin/strace"
KINDS = ("text", "photo", "tool", "approval")
LINE = re.compile(
    r'^\d+\s+(\d+\.\d+)\s+(\w+)\((\d+)<([^>]*)>(?:, "((?:\\x[0-9a-f]{2})*)"(?:\.\.\.)?, (\d+))?'
)
CONFIG = '[tools]\nplugins = ["tests.plugins.e2e_tools"]\napproval_timeout = 120\n'
SEEN = {"summary": "A red square.", "entities": [], "tables": [], "warnings": []}


def slow_disk(delay_ms: int, summary: Path | None = None) -> list[str]:
    """An strace prefix that delays every fsync/fdatasync by `delay_ms` (an SD card; 0: none),
    writing a call count summary (`strace -c`) to `summary` if given."""
    inject = ["-e", f"inject=fsync,fdatasync:delay_exit={delay_ms * 1000}"] if delay_ms else []
    out = ["-c", "-o", str(summary)] if summary else ["-o", "/dev/null"]
    return [STRACE, "-f", "--seccomp-bpf", "-qq", *out, "-e", "trace=fsync,fdatasync", *inject]


class TracedDaemon(Daemon):
    """`agentd run` with an optional strace prefix."""

    def __init__(self, tmp: Path, env: dict[str, str], prefix: list[str]) -> None:
        super().__init__(tmp, env)
        self.prefix = prefix

    def start(self, wait_ready: bool = True, timeout: float = 90.0) -> Daemon:
        self.starts += 1
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [*self.prefix, *AGENTD, "run"], env=self.env, cwd=self.tmp, stderr=log, stdout=log
        )
        if wait_ready:
            self.wait_for_log("agentd running", timeout)
        return self

    def _signal_daemon(self, sig: int) -> None:
        # strace, signalled itself, would detach and leave the daemon running: signal the child.
        assert self.proc is not None
        pid = self.proc.pid
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            os.kill(int(child), sig)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM the daemon, then wait for it (and strace)."""
        if self.prefix and self.proc is not None and self.proc.poll() is None:
            self._signal_daemon(signal.SIGTERM)
            return self.proc.wait(timeout)
        return super().stop(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self.prefix:
                self._signal_daemon(signal.SIGKILL)
            self.proc.kill()
            self.proc.wait(10)


def responder(body: dict[str, Any]) -> Any:
    """Vision and summary requests get their forced tool call; a user message asking for a
    tool gets that tool call once; everything else the fake's echo."""
    choice = body.get("tool_choice") or {}
    if choice.get("name") == "record_image_summary":
        return tool_use_reply("record_image_summary", SEEN)
    if choice.get("name") == "record_summary":
        return tool_use_reply("record_summary", {"summary": "A chat.", "facts": []})
    last = body["messages"][-1]["content"]
    blocks = [{"type": "text", "text": last}] if isinstance(last, str) else last
    if any(b.get("type") == "tool_result" for b in blocks):
        return None
    text = " ".join(b.get("text", "") for b in blocks)
    if "please count" in text:
        return tool_use_reply("count_words", {"text": "three little words"})
    if "please delete" in text:
        return tool_use_reply("delete_file", {"path": "/tmp/old"})
    return None


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.002)
    return value


def run_turn(
    tg: FakeTelegram, reader: Any, kind: str, chat: int, n: int
) -> tuple[float, float, float]:
    """One turn of this kind: (added, last reply seen, workflow complete) as epoch times."""
    before = len(tg._sent)
    added = time.time()
    if kind == "photo":
        update_id = tg.add_photo(chat, chat, png(), caption=f"what is this? #{n}")
    else:
        text = {"text": "hello", "tool": "please count", "approval": "please delete"}[kind]
        update_id = tg.add_message(chat, chat, f"{text} #{n}")
    if kind == "approval":
        request = wait(
            lambda: next((m for m in tg._sent[before:] if m.get("reply_markup")), None),
            60,
            "the approval request",
        )
        data = request["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        # Only the owner approves: the card is in their private chat (chat id = their id).
        owner = request["chat_id"]
        tg.add_callback_query(owner, owner, request["message_id"], data)
    sql = "SELECT status FROM workflow_instances WHERE id = ?"
    iid = f"tg-update-{update_id}"
    wait(lambda: (r := reader.execute(sql, (iid,)).fetchone()) and r[0] == "complete", 60, iid)
    replied = max(m["time"] for m in tg._sent[before:])
    return added, replied, time.time()


def run_pass(
    source: Path, name: str, turns: int, delay_ms: int, tmp: Path
) -> dict[str, list[tuple[float, float, float]]]:
    tmp.mkdir(parents=True)
    trace = tmp / "strace.txt"
    prefix: list[str] = []
    if name == "count":
        prefix = [
            STRACE,
            "-f",
            "--seccomp-bpf",
            "-qq",
            "-ttt",
            "-y",
            "-xx",
            "-s",
            "8",
            "-e",
            "trace=fsync,fdatasync,pwrite64",
            "-o",
            str(trace),
        ]
    elif name == "slow":
        prefix = slow_disk(delay_ms)
    windows: dict[str, list[tuple[float, float, float]]] = {k: [] for k in KINDS}
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        llm.set_responder(responder)
        (tmp / "agentd.toml").write_text(CONFIG)
        chats = [2000 + i for i in range(len(KINDS))]
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_ACCESS__ALLOWED_USER_IDS=str(chats),
            AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
            PYTHONPATH=f"{source}{os.pathsep}{REPO_ROOT}",
        )
        daemon = TracedDaemon(tmp, env, prefix)
        try:
            daemon.start()
            reader = open_sync(daemon.db_path, readonly=True)
            for kind, chat in zip(KINDS, chats, strict=True):
                run_turn(tg, reader, kind, chat, 0)  # warm-up, not counted
            for n in range(1, turns + 1):
                for kind, chat in zip(KINDS, chats, strict=True):
                    windows[kind].append(run_turn(tg, reader, kind, chat, n))
            reader.close()
            daemon.stop()
        finally:
            daemon.kill()
    return windows


def unhex(escaped: str) -> bytes:
    """strace -xx prints every byte as \\xNN (file paths included)."""
    return bytes.fromhex(escaped.replace("\\x", ""))


def count(trace: Path, windows: dict[str, list[tuple[float, float, float]]]) -> dict[str, Any]:
    """Per kind: mean fsyncs and commits per turn, and fsyncs by file."""
    calls: list[tuple[float, str, str, bytes]] = []
    for raw in trace.read_text(errors="replace").splitlines():
        m = LINE.match(raw)
        if m:
            data = unhex(m.group(5) or "") if int(m.group(6) or 0) == 24 else b""
            calls.append((float(m.group(1)), m.group(2), unhex(m.group(4)).decode(), data))
    out: dict[str, Any] = {}
    for kind, spans in windows.items():
        fsyncs, commits, files = 0, 0, Counter()
        for start, _, end in spans:
            for ts, call, path, data in calls:
                if not start <= ts <= end:
                    continue
                if call in ("fsync", "fdatasync"):
                    fsyncs += 1
                    files[Path(path).name] += 1
                elif path.endswith("-wal") and data[4:8] not in (b"", bytes(4)):
                    commits += 1  # bytes 4..7 of a 24-byte frame header: a commit frame
        n = len(spans)
        out[kind] = {"fsyncs": fsyncs / n, "commits": commits / n, "files": files, "n": n}
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--turns", type=int, default=10, help="turns of each kind per pass")
    ap.add_argument("--delay-ms", type=int, default=10, help="injected delay per fsync (slow)")
    ap.add_argument("--compare", type=Path, default=None, help="another checkout to run too")
    ap.add_argument("--passes", default="count,plain,slow")
    args = ap.parse_args()
    sources = [("this tree", REPO_ROOT)]
    if args.compare:
        sources.insert(0, (f"{args.compare}", args.compare.resolve()))
    passes = [p.strip() for p in args.passes.split(",") if p.strip()]
    root = Path(tempfile.mkdtemp(prefix="agentd-bench-fsync-"))
    print(
        f"agentd commits and fsyncs per turn — python {sys.version.split()[0]}, "
        f"nproc {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} at start, dir {root}"
    )
    try:
        for label, source in sources:
            commit = subprocess.run(
                ["git", "-C", str(source), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            print(f"\n== {label} (HEAD {commit or '?'}) — {args.turns} turns of each kind")
            for name in passes:
                tmp = root / f"{commit or 'tree'}-{name}-{len(list(root.iterdir()))}"
                windows = run_pass(source, name, args.turns, args.delay_ms, tmp)
                if name == "count":
                    for kind, c in count(tmp / "strace.txt", windows).items():
                        files = ", ".join(f"{f} {v / c['n']:.1f}" for f, v in c["files"].items())
                        print(
                            f"  {kind:<9} {c['fsyncs']:5.1f} fsyncs/turn   "
                            f"{c['commits']:5.1f} commits/turn   (fsyncs by file: {files})"
                        )
                else:
                    what = "no strace" if name == "plain" else f"+{args.delay_ms} ms per fsync"
                    for kind, spans in windows.items():
                        lat = [(replied - added) * 1000 for added, replied, _ in spans]
                        print(
                            f"  {kind:<9} latency ({what:<17}) p50 {pct(lat, 0.5):7.1f} ms"
                            f"   p95 {pct(lat, 0.95):7.1f} ms   "
                            f"mean {statistics.fmean(lat):7.1f} ms"
                        )
    finally:
        if not os.environ.get("KEEP"):
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
