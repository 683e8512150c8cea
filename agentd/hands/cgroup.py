"""A cgroup of its own for each command, so its memory and process count are the kernel's to
bound, not the command's to escape.

rlimits bound each process's address space, but not what a command holds in shared memory: a
`write()` into a memfd or a tmpfs file maps nothing, so one approved command could hold
gigabytes with "1024 MB" on its card, and the OOM killer would then pick whatever is biggest,
the daemon included. A cgroup's `memory.max` (v2) or `memory.limit_in_bytes` (v1) counts every
page charged to it, shared memory and tmpfs included, and its own OOM kill stays inside it.

`find()` looks once, at start, for where this process may make cgroups:
- cgroup v2 with the memory and pids controllers in this process's own cgroup, delegated to it
  (systemd's `Delegate=yes` in the shipped unit). The rule of v2 that a cgroup with processes
  has no controlled children is met by moving the daemon (and its own children) into a leaf
  `agentd-daemon` first; a cgroup holding anyone else's processes is left alone;
- else cgroup v1's memory and pids hierarchies, where they are writable (root in a container
  with the v1 controllers, as some hosts still run);
- else none, with the reason: the card and `agentd doctor` then say memory is not bounded.

Each command is started through a small shell that writes its own pid into the command's
cgroups and raises its OOM score before it execs the rest (no Python between fork and exec);
if it cannot join them it exits 125 and the command does not run.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Kind = Literal["v2", "v1", "none"]
DAEMON_LEAF = "agentd-daemon"
JOIN_FAILED = 125
# The sandbox's own processes (setpriv's exec chain, bwrap's two, pasta) beside the command's.
SANDBOX_PROCESSES = 4
# Joins every cgroup.procs named before "--", makes itself the OOM killer's first pick (an
# unprivileged process may raise its own score), then execs the command line after "--".
_JOIN = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; '
    'echo 1000 > /proc/self/oom_score_adj 2>/dev/null; exec "$@"'
)


@dataclass(frozen=True)
class CgroupHost:
    """Where each command's cgroup is made; `kind` "none": nowhere, and `why` says why."""

    kind: Kind = "none"
    # v2: the delegated cgroup commands' cgroups go in; v1: the memory and the pids parent.
    parents: tuple[str, ...] = ()
    why: str = "no cgroup was looked for"

    @property
    def enforced(self) -> bool:
        return self.kind != "none"


def none(why: str) -> CgroupHost:
    return CgroupHost("none", (), why)


# -- finding where ------------------------------------------------------------------------------


def _mounts(mountinfo: str) -> list[tuple[str, str, str, str]]:
    """(fstype, root inside the hierarchy, mount point, super options) of each cgroup mount."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((tail[0], fields[3], fields[4], tail[2]))
    return found


def _own_paths(text: str) -> dict[str, str]:
    """Controller ("" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _under(mount: tuple[str, str, str, str], path: str) -> Path | None:
    _, root, point, _ = mount
    if root != "/" and not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None
    rest = path[len(root) :] if root != "/" else path
    return Path(point) / rest.lstrip("/")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _ours(pid: int) -> bool:
    """Whether `pid` is this process or one of its descendants."""
    me, seen = os.getpid(), 0
    while pid > 1 and seen < 64:
        if pid == me:
            return True
        stat = _read(Path(f"/proc/{pid}/stat"))
        try:
            pid = int(stat.rpartition(")")[2].split()[1])
        except (IndexError, ValueError):
            return False
        seen += 1
    return False


def _v2(own: Path) -> CgroupHost:
    controllers = set(_read(own / "cgroup.controllers").split())
    if not {"memory", "pids"} <= controllers:
        return none(
            f"cgroup v2 is here, but {own} does not offer the memory and pids controllers "
            "(they are not delegated to agentd: under systemd, run the shipped unit, which sets "
            "Delegate=yes)"
        )
    if own.name == DAEMON_LEAF:  # set up already, by an earlier find() in this process
        own = own.parent
    enabled = set(_read(own / "cgroup.subtree_control").split())
    try:
        if not {"memory", "pids"} <= enabled:
            procs = [int(p) for p in _read(own / "cgroup.procs").split()]
            strangers = [p for p in procs if not _ours(p)]
            if strangers:
                return none(
                    f"{own} holds processes that are not agentd's ({len(strangers)}), so it "
                    "cannot make cgroups in it (run agentd as its own service, Delegate=yes)"
                )
            leaf = own / DAEMON_LEAF
            leaf.mkdir(exist_ok=True)
            for pid in procs:
                (leaf / "cgroup.procs").write_text(str(pid))
            (own / "cgroup.subtree_control").write_text("+memory +pids")
        _try_child(own)
    except OSError as exc:
        return none(f"cgroup v2 at {own} is not writable by agentd ({exc.strerror or exc})")
    return CgroupHost("v2", (str(own),), "")


def _try_child(parent: Path) -> None:
    probe = parent / f"agentd-probe-{secrets.token_hex(4)}"
    probe.mkdir()
    probe.rmdir()


def _v1(paths: dict[str, str], mounts: list[tuple[str, str, str, str]]) -> CgroupHost | str:
    found: list[Path] = []
    for controller in ("memory", "pids"):
        mount = next(
            (m for m in mounts if m[0] == "cgroup" and controller in m[3].split(",")), None
        )
        where = _under(mount, paths[controller]) if mount and controller in paths else None
        if where is None:
            return f"the cgroup v1 {controller} controller is not mounted for this process"
        found.append(where)
    try:
        for parent in found:
            _try_child(parent)
    except OSError as exc:
        return f"cgroup v1 at {found[0]} is not writable by agentd ({exc.strerror or exc})"
    return CgroupHost("v1", tuple(str(p) for p in found), "")


def find(proc: Path = Path("/proc/self")) -> CgroupHost:
    """Where this process may make a cgroup per command (blocking; never raises)."""
    paths = _own_paths(_read(proc / "cgroup"))
    mounts = _mounts(_read(proc / "mountinfo"))
    why_v2 = "there is no cgroup v2 hierarchy"
    unified = next((m for m in mounts if m[0] == "cgroup2"), None)
    if unified is not None and "" in paths:
        own = _under(unified, paths[""])
        if own is not None:
            host = _v2(own)
            if host.enforced:
                return host
            why_v2 = host.why
    v1 = _v1(paths, mounts)
    if isinstance(v1, CgroupHost):
        return v1
    return none(f"{why_v2}; and {v1}")


# -- one command's cgroup -----------------------------------------------------------------------


@dataclass(frozen=True)
class CommandGroup:
    """The cgroup(s) one command runs in: made before it starts, removed after it ended."""

    host: CgroupHost
    dirs: tuple[Path, ...]

    @property
    def procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv`, started in these cgroups (or not at all: exit 125)."""
        return ["/bin/sh", "-c", _JOIN, "sh", *self.procs, "--", *argv]

    def oom_killed(self) -> bool:
        """Whether the kernel killed something in it for passing its memory limit."""
        memory = self.dirs[0]
        text = _read(memory / ("memory.events" if self.host.kind == "v2" else "memory.oom_control"))
        # Only a kill counts: reaching the limit alone (v1's failcnt) is page cache reclaimed.
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdecimal():
                return int(value) > 0
        return False

    def remove(self) -> None:
        """Kill whatever is left in it and remove it (blocking; best effort, bounded)."""
        for d in self.dirs:
            if self.host.kind == "v2" and (d / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (d / "cgroup.kill").write_text("1")
            for _ in range(50):
                for pid in _read(d / "cgroup.procs").split():
                    with contextlib.suppress(OSError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def make(host: CgroupHost, memory_bytes: int, processes: int) -> CommandGroup:
    """A new cgroup (v2) or pair (v1) with the limits set; raises OSError if it cannot."""
    name = f"agentd-cmd-{secrets.token_hex(6)}"
    dirs = tuple(Path(p) / name for p in host.parents)
    group = CommandGroup(host, dirs)
    try:
        for d in dirs:
            d.mkdir()
        if host.kind == "v2":
            (dirs[0] / "memory.max").write_text(str(memory_bytes))
            # Without swap a page of shared memory stays charged: memory.max is the bound.
            with contextlib.suppress(FileNotFoundError):
                (dirs[0] / "memory.swap.max").write_text("0")
            (dirs[0] / "pids.max").write_text(str(processes))
        else:
            (dirs[0] / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(FileNotFoundError):  # swap accounting is off on some hosts
                (dirs[0] / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            (dirs[1] / "pids.max").write_text(str(processes))
    except OSError:
        group.remove()
        raise
    return group
