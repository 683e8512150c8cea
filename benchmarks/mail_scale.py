"""A 10,000-message mailbox on a real Dovecot: search latency, and `agentd run`'s RSS and idle
CPU with IDLE on (and how soon a new mail's notice arrives), each against a baseline measured
in the same run.

Search baseline: one IMAP session that logs in, selects INBOX and does nothing (what every
tool call pays). RSS/CPU baseline: the same daemon without a [[mail]] account.

    python benchmarks/mail_scale.py [--messages 10000] [--rounds 15] [--idle 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import shutil
import statistics
import sys
import tempfile
import time
from email.message import EmailMessage
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.config import MailAccountConfig
from agentd.mail import imap
from agentd.mail.mailbox import Mailbox
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram
from tests.mailservers import Dovecot

TICK = os.sysconf("SC_CLK_TCK")
SENDERS = ["ana@example.org", "bob@example.com", "news@shop.example", "boss@corp.example"]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fill_maildir(dovecot: Dovecot, user: str, n: int) -> None:
    """n messages written straight into the maildir (delivering 10k by LMTP takes minutes)."""
    cur = dovecot.root / "mail" / user / "Maildir" / "cur"
    for sub in ("cur", "new", "tmp"):
        (cur.parent / sub).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        msg = EmailMessage()
        msg["From"] = SENDERS[i % len(SENDERS)]
        msg["To"] = f"{user}@example.org"
        msg["Subject"] = f"Message {i} about {'invoice' if i % 97 == 0 else 'things'}"
        msg["Message-ID"] = f"<bench-{i}@example.org>"
        msg["Date"] = "Tue, 24 Nov 2026 09:00:00 +0000"
        msg.set_content(f"Body of message {i}.\n" + "lorem ipsum " * 40)
        flags = "S" if i % 10 else ""  # one in ten unread
        (cur / f"{1700000000 + i}.{i}.bench:2,{flags}").write_bytes(bytes(msg))
    dovecot_user = pwd.getpwnam("dovecot")
    for path in [dovecot.root / "mail" / user, *(dovecot.root / "mail" / user).rglob("*")]:
        os.chown(path, dovecot_user.pw_uid, dovecot_user.pw_gid)


def account(dovecot: Dovecot, user: str) -> MailAccountConfig:
    return MailAccountConfig(
        name="bench",
        address=f"{user}@example.org",
        username=user,
        password_env="PW",
        imap_host="127.0.0.1",
        imap_port=dovecot.port,
        imap_security="plain",
        timeout=60,
    )


async def timed(rounds: int, fn) -> float:  # type: ignore[no-untyped-def]
    """Median milliseconds of `rounds` awaited calls."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


async def searches(box: Mailbox, rounds: int) -> None:
    acc = box.account

    async def session_only() -> None:
        await box.run(lambda c: imap.select(c, acc, "INBOX", readonly=True))

    base = await timed(rounds, session_only)
    cases = [
        ("unread (1,000 hits), newest 20", dict(unread=True)),
        ("sender ana (2,500 hits), newest 20", dict(sender="ana@")),
        ("subject 'invoice' (104 hits), newest 20", dict(subject="invoice")),
        ("body text 'message 9999' (1 hit)", dict(text="message 9999")),
    ]
    print(
        f"\nsearch latency, {rounds} rounds, median (ms) — baseline: log in + select, {base:.1f} ms"
    )
    print(f"{'query':44} {'ms':>8} {'× baseline':>11} {'hits':>6}")
    for label, kw in cases:
        keys = imap.criteria(**kw)  # type: ignore[arg-type]
        hits = (await box.search("INBOX", keys, 20))[0]
        ms = await timed(rounds, lambda keys=keys: box.search("INBOX", keys, 20))
        print(f"{label:44} {ms:8.1f} {ms / base:11.2f} {hits:6d}")


def daemon_figures(
    tmp: Path,
    tg: FakeTelegram,
    llm: FakeAnthropic,
    config: str,
    env_extra: dict[str, str],
    idle: float,
) -> tuple[dict[str, float], Daemon]:
    (tmp / "agentd.toml").write_text(config)
    env = daemon_env(
        tmp, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp / "agentd.toml"), **env_extra
    )
    daemon = Daemon(tmp, env).start(timeout=300)
    if "[[mail]]" in config:
        daemon.wait_for_log("watching mail", 300)
    assert daemon.proc is not None
    pid = daemon.proc.pid
    time.sleep(1.0)
    before, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(idle)
    cpu = (cpu_seconds(pid) - before) / (time.monotonic() - t0)
    return {"rss": rss_mb(pid), "cpu": cpu}, daemon


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measurement")
    args = ap.parse_args()
    print(
        f"mail_scale — python {sys.version.split()[0]}, nproc {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} at start"
    )
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-mail-"))
    tmp.chmod(0o755)
    users = {"bench": "bench-pw"}
    dovecot = Dovecot(root=tmp / "dovecot", users=users).start()
    try:
        t0 = time.perf_counter()
        fill_maildir(dovecot, "bench", args.messages)
        print(f"{args.messages} messages written in {time.perf_counter() - t0:.1f} s")
        box = Mailbox(account(dovecot, "bench"), {"PW": users["bench"]})
        t0 = time.perf_counter()
        total = asyncio.run(box.search("INBOX", ["ALL"], 1))[0]
        print(
            f"first select + search ALL ({total} messages, Dovecot builds its index): "
            f"{(time.perf_counter() - t0) * 1000:.0f} ms"
        )
        asyncio.run(searches(box, args.rounds))
        rss(tmp, dovecot, users, args.idle)
    finally:
        dovecot.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def rss(tmp: Path, dovecot: Dovecot, users: dict[str, str], idle: float) -> None:
    mail = (
        f'[[mail]]\nname = "bench"\naddress = "bench@example.org"\nusername = "bench"\n'
        f'password_env = "BENCH_PW"\nimap_host = "127.0.0.1"\nimap_port = {dovecot.port}\n'
        'imap_security = "plain"\nwatch = ["INBOX"]\n'
        '[[mail.rules]]\nsender = "boss@"\naction = "notify"\n'
    )
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        (tmp / "base").mkdir()
        base, d = daemon_figures(tmp / "base", tg, llm, "", {}, idle)
        d.stop()
        (tmp / "mail").mkdir()
        with_mail, d = daemon_figures(
            tmp / "mail", tg, llm, mail, {"BENCH_PW": users["bench"]}, idle
        )
        try:
            sent = len(tg.sent)
            t0 = time.perf_counter()
            dovecot.deliver("bench", b"From: boss@corp.example\r\nSubject: ping\r\n\r\nx\r\n")
            tg.wait_until(lambda: len(tg.sent) > sent, 60, "the notice")
            notice_ms = (time.perf_counter() - t0) * 1000
            after = rss_mb(d.proc.pid)  # type: ignore[union-attr]
        finally:
            d.stop()
        print(f"\n`agentd run`, idle {idle:.0f} s — baseline: no [[mail]] account")
        print(f"{'':34} {'baseline':>10} {'IDLE on':>10} {'ratio':>7}")
        print(
            f"{'VmRSS (MB)':34} {base['rss']:10.1f} {with_mail['rss']:10.1f} "
            f"{with_mail['rss'] / base['rss']:7.2f}"
        )
        print(f"{'idle CPU (cores)':34} {base['cpu']:10.4f} {with_mail['cpu']:10.4f}")
        print(f"{'VmRSS after one notice (MB)':34} {'':>10} {after:10.1f}")
        print(
            f"new mail → notice sent (IDLE, no model call): {notice_ms:.0f} ms; "
            f"model requests: {len(llm.requests)}"
        )


if __name__ == "__main__":
    main()
