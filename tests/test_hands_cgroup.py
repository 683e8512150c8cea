"""Where a command's cgroup can be made (hands/cgroup.py), read from /proc files written here,
and what the approval card promises of memory with and without one (unit)."""

from __future__ import annotations

import os
from pathlib import Path

from agentd.config import ShellConfig
from agentd.hands import cgroup
from agentd.hands.shell import ShellArgs, card_text

V1_MOUNTS = """\
35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def _proc(tmp: Path, cgroups: str, mountinfo: str) -> Path:
    proc = tmp / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroups)
    (proc / "mountinfo").write_text(mountinfo)
    return proc


def test_mountinfo_and_own_paths_are_read_as_the_kernel_writes_them() -> None:
    mounts = cgroup._mounts(V1_MOUNTS)
    assert [m[0] for m in mounts] == ["cgroup", "cgroup", "cgroup2"]
    paths = cgroup._own_paths("4:memory:/docker/abc/x\n8:pids:/\n1:cpu,cpuacct:/\n0::/\n")
    assert paths["memory"] == "/docker/abc/x" and paths["cpuacct"] == "/" and paths[""] == "/"
    # A hierarchy mounted from inside (a container's view): the path is below the mount's root.
    assert cgroup._under(mounts[0], "/docker/abc/x") == Path("/sys/fs/cgroup/memory/x")
    assert cgroup._under(mounts[0], "/elsewhere") is None


def test_no_delegated_controllers_and_no_v1_means_none_with_the_reason(tmp_path: Path) -> None:
    root = tmp_path / "cg2"
    (root / "svc").mkdir(parents=True)
    (root / "svc" / "cgroup.controllers").write_text("cpu io\n")
    proc = _proc(tmp_path, "0::/svc\n", f"41 31 0:38 / {root} rw - cgroup2 cgroup2 rw\n")
    host = cgroup.find(proc)
    assert not host.enforced
    assert "memory and pids controllers" in host.why and "Delegate=yes" in host.why
    assert "v1 memory controller is not mounted" in host.why


def test_a_delegated_v2_cgroup_moves_the_daemon_into_a_leaf_first(tmp_path: Path) -> None:
    root = tmp_path / "cg2"
    own = root / "system.slice" / "agentd.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    (own / "cgroup.procs").write_text(f"{os.getpid()}\n")
    proc = _proc(
        tmp_path,
        "0::/system.slice/agentd.service\n",
        f"41 31 0:38 / {root} rw - cgroup2 cgroup2 rw\n",
    )
    host = cgroup.find(proc)
    assert host.kind == "v2" and host.parents == (str(own),)
    assert (own / cgroup.DAEMON_LEAF / "cgroup.procs").read_text() == str(os.getpid())
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"


def test_a_cgroup_shared_with_other_processes_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "cg2"
    own = root / "user.slice" / "session-1.scope"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    (own / "cgroup.procs").write_text(f"1\n{os.getpid()}\n")  # init is nobody's child of ours
    proc = _proc(tmp_path, "0::/user.slice/session-1.scope\n", f"1 1 0:1 / {root} - cgroup2 x rw\n")
    host = cgroup.find(proc)
    assert not host.enforced and "not agentd's" in host.why
    assert not (own / cgroup.DAEMON_LEAF).exists()


def test_the_card_promises_a_memory_bound_only_where_a_cgroup_enforces_it() -> None:
    args = ShellArgs(command="make")
    shell = ShellConfig(memory_mb=512, max_processes=32)
    unbounded = card_text(shell, args, cgroup.none("no cgroup v2 here"))
    assert "512 MB address space per process, NOT a bound on the command's memory" in unbounded
    assert "no cgroup v2 here" in unbounded
    bounded = card_text(shell, args, cgroup.CgroupHost("v1", ("/m", "/p"), ""))
    assert "512 MB memory in all (shared memory and /tmp included), 32 processes" in bounded


def test_a_kill_at_the_memory_limit_is_said_as_such() -> None:
    from agentd.hands.sandbox import Limits, RunResult
    from agentd.hands.shell import render_result

    def result(code: int, exceeded: bool) -> RunResult:
        return RunResult(
            exit_code=code, output="", bytes_out=0, duration_ms=1.0, sandbox="bwrap",
            memory_exceeded=exceeded,
        )  # fmt: skip

    limits, args = Limits(memory_mb=300), ShellArgs(command="x")
    killed = render_result(args, result(137, True), limits)
    assert killed.startswith("Killed: it used more than its memory limit of 300 MB")
    survived = render_result(args, result(0, True), limits)
    assert survived.startswith("Exit code 0. A process of it was killed at the memory limit")
    assert render_result(args, result(1, False), limits).startswith("Exit code 1.")


def test_a_limit_reached_without_a_kill_is_no_kill(tmp_path: Path) -> None:
    """v1's failcnt counts reclaimed page cache too: only oom_kill says a process died."""
    memory = tmp_path / "m"
    memory.mkdir()
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    (memory / "memory.failcnt").write_text("12\n")
    group = cgroup.CommandGroup(cgroup.CgroupHost("v1", (str(memory),), ""), (memory,))
    assert not group.oom_killed()
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert group.oom_killed()
