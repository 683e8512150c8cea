"""The sandbox as a fence, tried for real through bwrap: the seccomp filter, tmpfs sizes, a
read-only /dev, a masked host name, and the network namespace that reaches no local range."""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.hands import seccomp
from agentd.hands.sandbox import Limits, RunResult, Sandbox, probe, run_sandboxed
from tests.hands_support import reachable_dir

PROBLEM = probe(Sandbox(), reachable_dir())
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox here: {PROBLEM}")
NET_PROBLEM = (
    "pasta (Debian passt) or ip is not installed"
    if shutil.which("pasta") is None or shutil.which("ip", path="/usr/sbin:/usr/bin") is None
    else None
)
needs_pasta = pytest.mark.skipif(NET_PROBLEM is not None, reason=str(NET_PROBLEM))
LIMITS = Limits(wall_seconds=20, tmp_mb=8)


@pytest.fixture
def ws() -> Iterator[Path]:
    root = reachable_dir()
    yield root
    shutil.rmtree(root.parent, ignore_errors=True)


def run(command: str, ws: Path, **kw: object) -> RunResult:
    return asyncio.run(run_sandboxed(command, ws, sandbox=Sandbox(), limits=LIMITS, **kw))  # type: ignore[arg-type]


def test_the_filter_is_built_by_libseccomp() -> None:
    assert len(seccomp.program()) % 8 == 0 and len(seccomp.program()) > 8 * 20


@needs_bwrap
def test_nested_namespaces_are_denied(ws: Path) -> None:
    result = run(
        "unshare -U true && echo USERNS; unshare -n true && echo NETNS; "
        "unshare -m true && echo MOUNTNS; echo done",
        ws,
    )
    assert "done" in result.output
    assert "USERNS" not in result.output and "NETNS" not in result.output
    assert "MOUNTNS" not in result.output
    assert "Operation not permitted" in result.output


@needs_bwrap
def test_io_uring_userfaultfd_bpf_keyctl_and_perf_are_denied(ws: Path) -> None:
    if shutil.which("python3") is None:
        pytest.skip("python3 is not installed for the sandbox to call the kernel with")
    script = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        # x86-64 and arm64 numbers; each must fail with EPERM (1)
        "import platform\n"
        "nums = {'x86_64': dict(io_uring_setup=425, userfaultfd=323, bpf=321, keyctl=250, "
        "perf_event_open=298), 'aarch64': dict(io_uring_setup=425, userfaultfd=282, bpf=280, "
        "keyctl=219, perf_event_open=241)}[platform.machine()]\n"
        "for name, nr in nums.items():\n"
        "    r = libc.syscall(nr, 0, 0, 0, 0, 0)\n"
        "    print(name, r, ctypes.get_errno())\n"
    )
    (ws / "probe.py").write_text(script)
    result = run("python3 probe.py", ws)
    lines = dict(line.split(" ", 1) for line in result.output.strip().splitlines())
    assert set(lines) == {"io_uring_setup", "userfaultfd", "bpf", "keyctl", "perf_event_open"}
    assert all(v == "-1 1" for v in lines.values()), result.output


@needs_bwrap
def test_tmp_is_sized_and_dev_is_read_only(ws: Path) -> None:
    result = run(
        "head -c 20000000 /dev/zero > /tmp/big; ls -l /tmp/big | cut -d' ' -f5; "
        "touch /dev/evil && echo DEVWRITE; head -c 200000000 /dev/zero > /dev/shm/big; "
        "ls -l /dev/shm/big | cut -d' ' -f5; echo hi > /dev/null && echo null-ok",
        ws,
    )
    sizes = [int(w) for w in result.output.split() if w.isdigit()]
    assert sizes and sizes[0] <= 8 << 20, result.output  # /tmp stops at its size
    assert sizes[1] <= 64 << 20, result.output
    assert "No space left on device" in result.output
    assert "DEVWRITE" not in result.output and "null-ok" in result.output


@needs_bwrap
def test_host_details_are_masked(ws: Path) -> None:
    result = run(
        "cat /proc/sys/kernel/hostname /etc/hostname; cat /etc/machine-id 2>/dev/null | wc -c",
        ws,
    )
    assert result.output.split() == ["sandbox", "sandbox", "0"]
    assert socket.gethostname() not in result.output or socket.gethostname() == "sandbox"


def _host_macs() -> set[str]:
    found = set()
    for address in Path("/sys/class/net").glob("*/address"):
        mac = address.read_text().strip()
        if mac and mac != "00:00:00:00:00:00":
            found.add(mac)
    return found


@needs_bwrap
def test_the_hosts_interfaces_kernel_line_and_boot_id_are_masked(ws: Path) -> None:
    """Nothing in the sandbox names the host's network cards, their MAC addresses, the kernel's
    command line or this boot: /sys's interface folders are empty, /proc's details empty."""
    result = run(
        "ls /sys/class/net | wc -l; cat /proc/cmdline /proc/sys/kernel/random/boot_id | wc -c; "
        "find /sys/devices -name address -path '*/net/*' 2>/dev/null | xargs -r cat",
        ws,
    )
    lines = result.output.split()
    assert lines[:2] == ["0", "0"], result.output
    host = _host_macs() | {Path("/proc/sys/kernel/random/boot_id").read_text().strip()}
    assert not any(detail in result.output for detail in host), result.output
    cmdline = Path("/proc/cmdline").read_text().strip()
    assert not cmdline or cmdline not in result.output


@pytest.fixture
def host_service() -> Iterator[int]:
    """A TCP service on the host's loopback, which no sandboxed command may reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted = threading.Event()

    def serve() -> None:
        try:
            conn, _ = server.accept()
            accepted.set()
            conn.close()
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    assert not accepted.is_set(), "a sandboxed command reached the host's loopback"


@needs_bwrap
@needs_pasta
def test_network_commands_get_their_own_namespace(ws: Path, host_service: int) -> None:
    # Only routing decisions are asked for (ip route get sends nothing) and a connection to
    # the namespace's own loopback: no packet leaves this machine.
    result = run(
        f"ip -br addr; ip route get 8.8.8.8; for a in 10.1.2.3 172.16.0.1 192.168.1.1 "
        f"169.254.169.254 100.64.0.1; do ip route get $a 2>&1 | head -1; done; "
        f"(exec 3<>/dev/tcp/127.0.0.1/{host_service}) 2>&1 && echo REACHED; "
        f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{host_service}' 2>&1 && echo REACHED; "
        f"ip route add 10.0.0.0/24 dev lo 2>&1; cat /etc/resolv.conf; "
        f"unshare -U true 2>/dev/null && echo NESTED",
        ws,
        network=True,
    )
    out = result.output
    assert "100.127.255.2" in out and "via 100.127.255.1" in out, out
    assert out.count("No route to host") >= 5, out
    assert "REACHED" not in out
    assert "Operation not permitted" in out  # the command cannot change its routes
    assert "nameserver 100.127.255.1" in out
    assert "NESTED" not in out  # the seccomp filter holds with the network on too


def test_skill_scripts_never_run_without_bwrap(tmp_path: Path) -> None:
    from agentd.config import Config
    from agentd.skills.tools import script_runner

    config = Config.model_validate(
        {
            "storage": {"path": str(tmp_path / "agentd.db")},
            "tools": {"shell": {"sandbox": "none"}},
        }
    )
    runner = script_runner(config)
    assert runner.sandbox is None
    assert 'sandbox = "none"' in runner.unavailable and "bubblewrap" in runner.unavailable


def test_no_always_allow_for_programs_that_run_files() -> None:
    from agentd.config import ShellConfig
    from agentd.hands import rules
    from agentd.hands.shell import ShellArgs, offer

    shell = ShellConfig()
    for command in (
        "make",
        "python3 report.py",
        "python3.11 x.py",
        "./build.sh",
        "sh -c ls",
        "find . -exec rm {} +",
        "/usr/bin/env ls",
        "npm test",
        "tar xf a.tar",
    ):
        assert offer(shell, ShellArgs(command=command)) is None, command
    assert offer(shell, ShellArgs(command="systemctl restart jelly")) == [
        "systemctl",
        "restart",
        "jelly",
    ]
    assert rules.executes_files("Python3") and not rules.executes_files("df")


def test_an_always_allow_rule_holds_only_in_its_chat_and_for_its_user(tmp_path: Path) -> None:
    import time as clock

    from agentd.access import approvals
    from agentd.config import ShellConfig
    from agentd.db import open_sync
    from agentd.db.migrations import apply_migrations
    from agentd.hands import rules
    from agentd.hands.shell import ShellArgs, ShellPolicy
    from agentd.tools.base import CallState

    conn = open_sync(tmp_path / "db.sqlite")
    apply_migrations(conn)
    now = clock.time()
    conn.execute("BEGIN IMMEDIATE")
    approvals.create(
        conn,
        approvals.Approval(
            id="ap1",
            instance_id="i",
            tool_use_id="t",
            chat_id=7,
            chat_kind="private",
            user_id=7,
            tool="shell",
            risk="high",
            args_digest="d",
            args_preview="p",
            status="pending",
            created_at=now,
            expires_at=now + 600,
        ),
    )
    rules.add_rule(conn, "systemctl", "restart jelly", "telegram:7", "ap1")
    conn.execute("COMMIT")
    conn.close()
    policy = ShellPolicy(shell=ShellConfig(), book=rules.RuleBook(tmp_path / "db.sqlite"))
    args = ShellArgs(command="systemctl restart jelly")
    try:
        here = policy.assess(args, CallState(chat_id=7, user_id=7))
        assert here is not None and here.risk == "low" and "rule" in here.reason
        assert policy.assess(args, CallState(chat_id=99, user_id=99)) is None  # asks
        assert policy.assess(args, CallState(chat_id=7, user_id=99)) is None  # another user
        assert policy.assess(args, CallState()) is None  # unknown chat: asks
    finally:
        policy.book.close()
