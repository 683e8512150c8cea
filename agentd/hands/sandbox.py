"""Run one command line in bubblewrap: read-only system, one writable folder, private /tmp,
no network unless asked, an empty environment, rlimits, a wall clock, capped output.

`run_sandboxed` is the one entry point (the shell tool uses it; skills will run their scripts
through it with their folder mounted read-only). Why each choice:
- only /usr, /etc, /sys and the library links are mounted (read-only), never `/`: the
  daemon's database, its config folder and `agentd.env` are not in the sandbox at all (and
  are masked if under /etc);
- `--unshare-all` (user, pid, ipc, uts, cgroup, net namespaces), `--cap-drop ALL`,
  `--new-session` (no TIOCSTI into the daemon's terminal) and `--die-with-parent` (a daemon
  killed with -9 takes its commands with it); a seccomp filter (seccomp.py) on top;
- the workspace is mounted by descriptor (`--bind-fd`), reached without following a link,
  and bwrap refuses to start when what it would mount is not that folder;
- /tmp, /run and /dev/shm are tmpfs with sizes (tmpfs is not counted by RLIMIT_AS), /dev is
  read-only, the host name and machine ids are masked;
- with the network, pasta gives the command a namespace of its own that reaches the internet
  and nothing local (UNROUTABLE);
- as root, the command runs as `run_as` (nobody) through setpriv: the kernel never applies
  RLIMIT_NPROC to uid 0, so a fork bomb run as root would not be stopped by a process limit;
- rlimits are set by prlimit inside the sandbox (no Python between fork and exec); memory as a
  whole (shared memory, memfd and the tmpfs mounts included) and the process count are bounded
  by a cgroup of the command's own where one can be had (cgroup.py), and said to be unbounded
  where not;
- the whole tree dies on timeout or cancel: the sandbox's pid 1 is killed and the kernel kills
  every process of its pid namespace with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from agentd.hands import cgroup, seccomp
from agentd.hands.workspace import Workspace

SandboxMode = Literal["bwrap", "none"]
INSIDE_WORKSPACE = "/workspace"
_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
# Merged-/usr systems have these as links into /usr; older ones as folders of their own.
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
# What identifies the machine: its id, firmware tables and serial numbers.
_HOST_DETAILS = ("/etc/machine-id", "/sys/firmware", "/sys/devices/virtual/dmi")
# The kernel's command line and this boot's id (host-wide, whatever the namespaces), masked
# in the sandbox's own /proc.
_PROC_DETAILS = ("/proc/cmdline", "/proc/sys/kernel/random/boot_id")
# Where /sys names the host's network interfaces and their hardware addresses: the sandbox
# has a network of its own (or none), so the host's are nobody's business there.
_NET_CLASSES = ("/sys/class/net", "/sys/class/ieee80211", "/sys/class/bluetooth")
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 65_536


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 60
    memory_mb: int = 1024
    max_processes: int = 64
    wall_seconds: float = 120.0
    output_bytes: int = 32_000  # kept for the caller: half head, half tail
    max_file_mb: int = 1024
    tmp_mb: int = 256  # the private /tmp (tmpfs: not counted by the memory limit)
    # Reading output costs the daemon CPU: past this many bytes in all, the command is stopped.
    drain_bytes: int = 64_000_000


@dataclass(frozen=True)
class Sandbox:
    """How commands are isolated; built once from the config (`from_config` in hands.shell)."""

    mode: SandboxMode = "bwrap"
    bwrap: str = "bwrap"
    run_as: str = "nobody"  # only when the daemon runs as root
    # Host paths that must not be visible even if they sit under a mounted folder.
    hide: tuple[str, ...] = ()
    # /sys read-only: lsblk, sensors and friends need it; the sandbox user reads only what
    # any local user may.
    system_ro: tuple[str, ...] = ("/usr", "/etc", "/sys")
    extra_env: tuple[tuple[str, str], ...] = field(default=())
    # Where each command's cgroup is made (hands/cgroup.py `find`, at the daemon's start);
    # "none": memory is bounded per process by rlimits only, and the card says so.
    cgroups: cgroup.CgroupHost = field(default=cgroup.CgroupHost())


class RunResult(BaseModel):
    """What a command did: how it ended, its output (capped), and what the run cost."""

    exit_code: int | None  # None: killed by a signal
    signal: int | None = None
    stopped: Literal["", "wall_time", "output", "cancelled"] = ""
    output: str
    bytes_out: int
    truncated: bool = False
    duration_ms: float
    sandbox: SandboxMode
    # The kernel killed it for passing its cgroup's memory limit.
    memory_exceeded: bool = False


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create its namespaces here; the message says how to fix it."""


def _run_as_ids(name: str) -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    if not name:
        # uid 0 without capabilities still owns every root file: /etc/ssh's host keys, say.
        raise SandboxUnavailable(
            "agentd runs as root, so [tools.shell] run_as must name an unprivileged user "
            "(default: nobody) for commands to run as"
        )
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SandboxUnavailable(
            f"[tools.shell] run_as = {name!r} is not a user on this machine; create it or "
            "name another unprivileged user"
        ) from None
    if entry.pw_uid == 0:
        raise SandboxUnavailable("[tools.shell] run_as must not be root")
    return entry.pw_uid, entry.pw_gid


def _mask(path: str) -> list[str]:
    if os.path.isdir(path):
        return ["--tmpfs", path]
    if os.path.lexists(path):
        return ["--ro-bind", "/dev/null", path]
    return []


# Commands with the network get a namespace of their own, connected by pasta (user-mode
# networking: its sockets are the daemon's, so it needs no privilege). These ranges are made
# unroutable inside before the command starts: the host's loopback services (pasta maps none,
# --no-map-gw), the LAN, link-local and cloud metadata (169.254.169.254), carrier-grade NAT
# and other reserved ranges. IPv6 is off (-4): its link-local routing cannot be fenced the
# same way.
UNROUTABLE = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
)
# The namespace's own small network (inside carrier-grade NAT space, a /30 that is more
# specific than the unroutable /10); pasta answers DNS at the gateway and forwards it to the
# host's resolver.
_NS_ADDR, _NS_GW = "100.127.255.2", "100.127.255.1"
_NET_SETUP = (
    'set -e; for r in $AGENTD_UNROUTABLE; do ip route add unreachable "$r"; done; '
    'unset AGENTD_UNROUTABLE; exec "$@"'
)
# The browser's namespace reaches nothing at all but the ports forwarded to the host.
_NO_DEFAULT = "ip route replace unreachable default; "


@dataclass
class Launch:
    """A command line ready to start, and the descriptors it hands to bwrap (the caller passes
    them to the child and closes them once it started)."""

    argv: list[str]
    cwd: str
    fds: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def keep(self, fd: int) -> str:
        self.fds.append(fd)
        return str(fd)


def _as_workspace(workspace: Workspace | Path) -> Workspace:
    if isinstance(workspace, Workspace):
        return workspace
    return Workspace(workspace, max_bytes=0, trash_days=0, chown=None)


def _open_bind(path: str) -> int:
    """A descriptor of a folder to mount read-only (a skill's staged copy): its last part is
    not followed; bwrap checks that what it mounts is this very folder."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def bwrap_argv(
    sandbox: Sandbox,
    launch: Launch,
    workspace: Workspace,
    cwd: str,
    limits: Limits,
    *,
    binds_ro: Sequence[tuple[str, str]] = (),
    network: bool = False,
) -> list[str]:
    """The bwrap command line up to (not including) the command it runs; the descriptors it
    names are added to `launch`."""
    bwrap = shutil.which(sandbox.bwrap) or sandbox.bwrap
    argv = [bwrap, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if network:
        # Already in pasta's user and network namespace: the rest are new, the network is
        # pasta's, and the user namespace is pasta's (a nested one is denied by the filter).
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        argv += ["--unshare-all"]
    argv += ["--hostname", "sandbox"]
    argv += _system_mounts(sandbox, launch)
    argv += [
        "--proc",
        "/proc",
        *_proc_masks(launch),
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--size",
        str(64 << 20),
        "--tmpfs",
        "/dev/shm",
        "--size",
        str(limits.tmp_mb << 20),
        "--tmpfs",
        "/tmp",
        "--size",
        str(8 << 20),
        "--tmpfs",
        "/run",
    ]
    argv += _workspace_mounts(launch, workspace)
    for source, target in binds_ro:
        argv += ["--ro-bind-fd", launch.keep(_open_bind(source)), target]
    if network:
        argv += _resolver(launch)
    argv += ["--seccomp", launch.keep(seccomp.memfd())]
    argv += ["--chdir", cwd, "--clearenv"]
    for key, value in _env(sandbox, cwd):
        argv += ["--setenv", key, value]
    return argv


def _system_mounts(sandbox: Sandbox, launch: Launch) -> list[str]:
    argv: list[str] = []
    for path in sandbox.system_ro:
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in (*_SECRET_FILES, *_HOST_DETAILS, *sandbox.hide):
        if any(path == p or path.startswith(p.rstrip("/") + "/") for p in sandbox.system_ro):
            argv += _mask(path)
    if "/sys" in sandbox.system_ro:
        for path in _interface_dirs():
            argv += ["--tmpfs", path]
    if "/etc" in sandbox.system_ro and os.path.lexists("/etc/hostname"):
        argv += ["--ro-bind-data", launch.keep(seccomp.data_fd("hostname", b"sandbox\n"))]
        argv += ["/etc/hostname"]
    return argv


def _proc_masks(launch: Launch) -> list[str]:
    """Empty files over the host-wide details of the sandbox's /proc (a device node there
    would be refused: /proc is mounted nodev)."""
    argv: list[str] = []
    for path in _PROC_DETAILS:
        if os.path.exists(path):
            argv += ["--ro-bind-data", launch.keep(seccomp.data_fd("masked", b"")), path]
    return argv


def _interface_dirs() -> list[str]:
    """The /sys folders that name the host's network interfaces: the class folders, and each
    device's `net` folder the class links into (where its MAC address also is)."""
    found: list[str] = []
    for cls in _NET_CLASSES:
        if not os.path.isdir(cls):
            continue
        for name in sorted(os.listdir(cls)):
            real = os.path.dirname(os.path.realpath(os.path.join(cls, name)))
            if real.startswith("/sys/devices/") and real not in found:
                found.append(real)
        found.append(cls)
    return found


def _workspace_mounts(launch: Launch, workspace: Workspace) -> list[str]:
    """The workspace by descriptor: opened without following a link below the configured
    folder, and bwrap refuses to start if what it mounts is not that very folder (a link
    swapped in meanwhile). The shared top's users/ is mounted read-only over itself, so no
    command of the owners can rename or replace a paired user's folder."""
    fd = workspace.open_root()
    argv = ["--bind-fd", launch.keep(fd), INSIDE_WORKSPACE]
    if not workspace.sub:
        try:
            users = os.open("users", _NOFOLLOW_DIR, dir_fd=fd)
        except FileNotFoundError:
            return argv
        except OSError as exc:
            raise SandboxUnavailable(
                "the workspace's users/ is a link or not a folder; agentd does not follow it. "
                "Remove it on the server (agentd makes it again)"
            ) from exc
        argv += ["--ro-bind-fd", launch.keep(users), f"{INSIDE_WORKSPACE}/users"]
    return argv


def _resolver(launch: Launch) -> list[str]:
    """DNS through pasta's forwarder (the host's resolver may sit in an unroutable range)."""
    conf = seccomp.data_fd("resolv.conf", f"nameserver {_NS_GW}\n".encode())
    target = os.path.realpath("/etc/resolv.conf")
    argv = []
    if not target.startswith("/etc/"):  # a link into /run (systemd-resolved): empty here
        argv += ["--dir", os.path.dirname(target)]
    return [*argv, "--ro-bind-data", launch.keep(conf), target]


def network_prefix(tcp_ns: Sequence[int] = (), *, fence_default: bool = False) -> list[str]:
    """pasta and the route fence, up to the command. `tcp_ns`: ports of the namespace's
    loopback forwarded to the host's (the browser's proxy, and nothing else); `fence_default`:
    no route out at all, so those ports are the only way out."""
    pasta = shutil.which("pasta", path=_PATH)
    ip = shutil.which("ip", path=_PATH)
    if pasta is None or ip is None:
        raise SandboxUnavailable(
            "commands with the network need pasta and ip to give them a network of their own: "
            "`apt-get install passt iproute2`"
        )
    return [
        pasta,
        "--quiet",
        "--foreground",
        "--config-net",
        "--no-map-gw",
        "--ipv4-only",
        "--address",
        _NS_ADDR,
        "--netmask",
        "30",
        "--gateway",
        _NS_GW,
        "--dns-forward",
        _NS_GW,
        # No port of the host's loopback is forwarded into the namespace (pasta's default
        # forwards every bound one) and none of the namespace's out.
        "--tcp-ports",
        "none",
        "--udp-ports",
        "none",
        "--tcp-ns",
        ",".join(str(p) for p in tcp_ns) or "none",
        "--udp-ns",
        "none",
        "--",
        "/bin/sh",
        "-c",
        _NET_SETUP.replace("unset", _NO_DEFAULT + "unset") if fence_default else _NET_SETUP,
        "sh",
    ]


def _env(sandbox: Sandbox, cwd: str) -> list[tuple[str, str]]:
    # Nothing of the daemon's environment: its secrets live there.
    return [
        ("PATH", _PATH),
        ("HOME", INSIDE_WORKSPACE),
        ("LANG", "C.UTF-8"),
        ("TERM", "dumb"),
        ("PWD", cwd),
        *sandbox.extra_env,
    ]


def _prlimit(limits: Limits) -> list[str]:
    prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
    return [
        prlimit,
        f"--cpu={limits.cpu_seconds}",
        f"--as={limits.memory_mb * 1024 * 1024}",
        f"--nproc={limits.max_processes}",
        f"--fsize={limits.max_file_mb * 1024 * 1024}",
        "--core=0",
        "--",
    ]


def command_argv(
    sandbox: Sandbox,
    command: str,
    workspace: Workspace | Path,
    cwd: str,
    limits: Limits,
    *,
    binds_ro: Sequence[tuple[str, str]] = (),
    network: bool = False,
) -> Launch:
    """The full command line, the host folder it starts in and the descriptors it needs; on
    an error every descriptor opened so far is closed."""
    space = _as_workspace(workspace)
    shell = ["/bin/sh", "-c", command]
    if sandbox.mode == "none":
        host_cwd = str(space.root / cwd.removeprefix(INSIDE_WORKSPACE).lstrip("/"))
        # No pid namespace here: at least the shell dies with a daemon killed by -9 (its
        # children may outlive it; that is part of what "none" gives up).
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        return Launch([setpriv, "--pdeathsig", "KILL", "--", *_prlimit(limits), *shell], host_cwd)
    ids = _run_as_ids(sandbox.run_as)
    prefix: list[str] = []
    if ids is not None:
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        prefix = [
            setpriv,
            f"--reuid={ids[0]}",
            f"--regid={ids[1]}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]
    launch = Launch([], "/")
    try:
        if network:
            prefix += network_prefix()
            launch.env["AGENTD_UNROUTABLE"] = " ".join(UNROUTABLE)
        argv = bwrap_argv(sandbox, launch, space, cwd, limits, binds_ro=binds_ro, network=network)
    except BaseException:
        launch.close()
        raise
    launch.argv = [*prefix, *argv, "--", *_prlimit(limits), *shell]
    return launch


class _Capture:
    """Keeps the first and last `limit/2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> tuple[str, bool]:
        kept = len(self.head) + len(self.tail)
        head = self.head.decode("utf-8", "replace")
        if kept >= self.total:
            return head + self.tail.decode("utf-8", "replace"), False
        cut = self.total - kept
        tail = self.tail.decode("utf-8", "replace")
        return f"{head}\n[… {cut} bytes of output cut here …]\n{tail}", True


def _kill_tree(proc: asyncio.subprocess.Process) -> None:
    # The process group holds setpriv/bwrap/prlimit/sh (sandbox "none": the whole command);
    # inside bwrap, killing its pid 1 makes the kernel kill the rest of the pid namespace.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def _drain(proc: asyncio.subprocess.Process, capture: _Capture, cap: int) -> bool:
    """Read until EOF; False when the output passed `cap` bytes (the caller stops it)."""
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(_CHUNK):
        capture.add(chunk)
        if capture.total > cap:
            return False
    return True


async def run_sandboxed(
    command: str,
    workspace: Workspace | Path,
    *,
    sandbox: Sandbox,
    limits: Limits,
    cwd: str = INSIDE_WORKSPACE,
    binds_ro: Sequence[tuple[str, str]] = (),
    network: bool = False,
    on_start: Callable[[int], None] | None = None,
) -> RunResult:
    """Run `command` with `sh -c` in the sandbox, `workspace` writable at /workspace.

    `binds_ro` adds (host path, path inside) read-only mounts (a skill's folder); like the
    workspace, they are mounted by descriptor and the sandbox user must be able to reach them.
    `cwd` is a path inside the sandbox. Cancelling the awaiting task kills the whole process
    tree before CancelledError goes on.
    """
    launch = await asyncio.to_thread(
        command_argv,
        sandbox,
        command,
        workspace,
        cwd,
        limits,
        binds_ro=binds_ro,
        network=network,
    )
    env = {"PATH": _PATH, "LANG": "C.UTF-8", "HOME": "/", **launch.env}
    try:
        group = await _command_group(sandbox, limits)
    except BaseException:
        launch.close()
        raise
    argv = group.wrap(launch.argv) if group is not None else launch.argv
    started = time.monotonic()
    try:
        result = await _run(launch, argv, env, limits, on_start)
    finally:
        if group is not None:
            exceeded = group.oom_killed()
            await asyncio.shield(asyncio.to_thread(group.remove))
    return RunResult(
        **result,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
        sandbox=sandbox.mode,
        memory_exceeded=group is not None and exceeded,
    )


async def _command_group(sandbox: Sandbox, limits: Limits) -> cgroup.CommandGroup | None:
    """The command's own cgroup with its limits, where cgroups can be had (None: they cannot,
    as the card said); a failure to make one stops the command, never runs it unbounded."""
    if not sandbox.cgroups.enforced:
        return None
    try:
        return await asyncio.to_thread(
            cgroup.make,
            sandbox.cgroups,
            limits.memory_mb << 20,
            limits.max_processes + cgroup.SANDBOX_PROCESSES,
        )
    except OSError as exc:
        raise SandboxUnavailable(
            f"the command's cgroup could not be made ({exc.strerror or exc}), so it did not run "
            "(its memory limit would not hold); `agentd doctor` says what this host offers"
        ) from None


async def _run(
    launch: Launch,
    argv: list[str],
    env: dict[str, str],
    limits: Limits,
    on_start: Callable[[int], None] | None,
) -> dict[str, object]:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=launch.cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            pass_fds=launch.fds,
        )
    finally:
        launch.close()
    if on_start is not None:
        on_start(proc.pid)
    capture = _Capture(limits.output_bytes)
    stopped: Literal["", "wall_time", "output", "cancelled"] = ""
    try:
        within = await asyncio.wait_for(
            _drain(proc, capture, limits.drain_bytes), timeout=limits.wall_seconds
        )
        if not within:
            stopped = "output"
            _kill_tree(proc)
        await asyncio.wait_for(proc.wait(), timeout=max(0.1, limits.wall_seconds))
    except TimeoutError:
        stopped = "wall_time"
        _kill_tree(proc)
    except asyncio.CancelledError:
        _kill_tree(proc)
        await asyncio.shield(proc.wait())
        raise
    finally:
        if proc.returncode is None:
            _kill_tree(proc)
    # Read what is left to EOF so the pipe closes (a killed tree closes it at once).
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.communicate(), timeout=2.0)
    code = await proc.wait()
    output, truncated = capture.text()
    return {
        "exit_code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "stopped": stopped,
        "output": output,
        "bytes_out": capture.total,
        "truncated": truncated,
    }


def probe(sandbox: Sandbox, scratch: Workspace | Path) -> str | None:
    """None when the sandbox works here; else why not and how to fix it (for doctor and start)."""
    import subprocess

    if sandbox.mode == "none":
        return None
    if shutil.which(sandbox.bwrap) is None:
        return (
            f"bubblewrap ({sandbox.bwrap!r}) is not installed: `apt-get install bubblewrap`, or "
            'set [tools.shell] sandbox = "none" to run commands unsandboxed (not advised)'
        )
    try:
        # Bind the real folder, so a workspace the sandbox user cannot reach fails here.
        launch = command_argv(sandbox, "exit 0", scratch, INSIDE_WORKSPACE, Limits())
        try:
            done = subprocess.run(
                launch.argv,
                cwd=launch.cwd,
                env={"PATH": _PATH},
                capture_output=True,
                timeout=20,
                stdin=subprocess.DEVNULL,
                pass_fds=launch.fds,
            )
        finally:
            launch.close()
    except (SandboxUnavailable, seccomp.SeccompUnavailable) as exc:
        return str(exc)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if done.returncode == 0:
        return None
    why = done.stderr.decode("utf-8", "replace").strip()[:300] or f"exit {done.returncode}"
    if "namespace" in why or "not permitted" in why or "uid map" in why:
        return (
            f"bubblewrap cannot create its namespaces here ({why}). Allow unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1, or "
            "kernel.apparmor_restrict_unprivileged_userns=0), or run in a VM or container that "
            "permits them"
        )
    if "Permission denied" in why and sandbox.run_as and os.geteuid() == 0:
        return (
            f"the sandbox user {sandbox.run_as!r} cannot reach {scratch} ({why}): let it pass "
            "through the folders above it (chmod o+x), or set [tools.workspace] path to a "
            "folder it can reach"
        )
    return f"bubblewrap fails here: {why}"
