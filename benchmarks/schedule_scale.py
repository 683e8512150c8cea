"""10,000 active schedules: start-up, idle CPU and RSS of `agentd run`, and lateness under a burst.

Runs `agentd run` as a subprocess against the local fakes (tests/daemon_process.py), twice on
the same database: first with no schedules (the baseline), then with --schedules active ones
(created the way `agentd schedule add` does, straight into SQLite while the daemon is down).
Of those, --burst are one-off reminders due at the same second; the rest repeat daily and sleep.

Figures: time from process start to "agentd running" and until every occurrence instance is
asleep again (each is resumed from the journal at start), idle CPU (utime + stime from
/proc/<pid>/stat over --idle seconds) and VmRSS, each against the baseline; and how late the
burst's reminders fire (schedule_runs.at − due: decided, sent to the fake Telegram and recorded),
p50 / p99 / max.

Usage: .venv/bin/python benchmarks/schedule_scale.py [--schedules 10000] [--burst 1000] [--idle 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.config import ScheduleConfig
from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.schedule.create import ScheduleRequest, create, timing
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def add_schedules(db: Path, total: int, burst: int, burst_at: float) -> None:
    conn = open_sync(db)
    apply_migrations(conn)
    cfg = ScheduleConfig(max_active_per_user=total + 1, min_interval=1)
    now = time.time()
    tomorrow = time.strftime("%Y-%m-%dT", time.gmtime(now + 86400))
    try:
        conn.execute("BEGIN")
        for n in range(total):
            if n < burst:
                req = ScheduleRequest(
                    message=f"burst {n}",
                    at=time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(burst_at)),
                )
            else:
                start = f"{tomorrow}{n % 24:02d}:{n % 60:02d}:{(n // 60) % 60:02d}"
                req = ScheduleRequest(message=f"daily {n}", every="1d", start=start)
            rec = timing(req, now=now, config=cfg, default_timezone="UTC")
            create(
                conn,
                req,
                rec,
                schedule_id=f"b{n:06d}",
                user_id=OWNER,
                chat_id=OWNER,
                chat_kind="private",
                now=now,
                config=cfg,
                by="bench",
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def sleeping(daemon: Daemon) -> int:
    return daemon.query("SELECT COUNT(*) FROM workflow_instances WHERE status = 'sleeping'")[0][0]


def run_once(
    tmp: Path, tg: FakeTelegram, llm: FakeAnthropic, expect_sleeping: int, idle: float
) -> tuple[dict[str, float], Daemon]:
    """Start the daemon; time ready and settled; measure idle CPU and RSS. It keeps running."""
    env = daemon_env(tmp, tg.base_url, llm.base_url, AGENTD_ENGINE__EVENT_POLL_INTERVAL="0.5")
    daemon = Daemon(tmp, env)
    started = time.monotonic()
    try:
        daemon.start(timeout=300)
        ready = time.monotonic() - started
        deadline = time.monotonic() + 600
        while sleeping(daemon) < expect_sleeping:
            assert time.monotonic() < deadline, f"only {sleeping(daemon)} asleep"
            time.sleep(0.05)
        settled = time.monotonic() - started
        assert daemon.proc is not None
        pid = daemon.proc.pid
        time.sleep(1.0)
        before, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(idle)
        cpu = (cpu_seconds(pid) - before) / (time.monotonic() - t0)
    except BaseException:
        if daemon.proc is not None:
            daemon.proc.kill()
        raise
    return {"ready": ready, "settled": settled, "cpu": cpu, "rss": rss_mb(pid)}, daemon


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--schedules", type=int, default=10_000)
    ap.add_argument("--burst", type=int, default=1000, help="one-offs due at the same second")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measurement")
    args = ap.parse_args()
    print(
        f"schedule_scale — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} at start"
    )
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-sched-"))
    try:
        with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
            tg.add_chat(OWNER)
            base, first = run_once(tmp, tg, llm, 0, args.idle)
            first.stop()
            # Due once the loaded daemon has settled and idled: measured, not guessed.
            # (resuming one sleeping occurrence costs ~2 commits; 30 ms each is a busy box)
            burst_at = time.time() + 2 * base["settled"] + args.idle + 60 + 0.03 * args.schedules
            t0 = time.monotonic()
            add_schedules(tmp / "agentd.db", args.schedules, args.burst, burst_at)
            created = time.monotonic() - t0
            loaded, daemon = run_once(tmp, tg, llm, args.schedules, args.idle)
            try:
                wait = burst_at - time.time()
                print(
                    f"created {args.schedules} schedules in {created:.1f} s; burst due in "
                    f"{wait:.0f} s"
                )
                assert wait > 0, "the loaded daemon took too long to settle; raise the margin"
                deadline = time.monotonic() + wait + 600
                runs = "SELECT COUNT(*) FROM schedule_runs"
                while (done := daemon.query(runs)[0][0]) < args.burst:
                    assert time.monotonic() < deadline, f"only {done} of the burst ran"
                    time.sleep(0.2)
                late = sorted(r[0] for r in daemon.query("SELECT at - due FROM schedule_runs"))
                outcomes = daemon.query("SELECT outcome, COUNT(*) FROM schedule_runs GROUP BY 1")
                daemon.stop()
            finally:
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.proc.kill()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = args.schedules
    print(f"\n{'':32} {'no schedules':>14} {f'{n} schedules':>16}   ratio")
    rows = (
        ("ready", "start → 'agentd running'", "s"),
        ("settled", "start → all occurrences asleep", "s"),
        ("cpu", "idle CPU (cores)", ""),
        ("rss", "VmRSS (MB)", ""),
    )
    for key, label, unit in rows:
        a, b = base[key], loaded[key]
        ratio = f"{b / a:6.2f}×" if a > 0.0005 else "   n/a"
        print(f"{label:32} {a:>13.3f}{unit} {b:>15.3f}{unit}   {ratio}")
    p = statistics.quantiles(late, n=100)
    print(
        f"\nburst of {args.burst} reminders due at one second, lateness (at − due): "
        f"p50 {p[49]:.2f} s, p99 {p[98]:.2f} s, max {late[-1]:.2f} s "
        f"({args.burst / max(late[-1], 1e-3):.0f} runs/s); outcomes {dict(outcomes)}"
    )
    print(f"sent by the fake Telegram: {len(tg.sent)}")


if __name__ == "__main__":
    main()
