"""How Chromium is started: inside bubblewrap, in a network namespace whose only way out is
agentd's proxy, as an unprivileged user, with a seccomp filter and no secrets.

Playwright launches "the browser" by running an executable with its own arguments and talks to
it over the pipe on descriptors 3 and 4 (`--remote-debugging-pipe`): no debugging port exists
anywhere. The executable it is given is a small script written here that runs

    setpriv (as nobody, when root) → pasta (a network namespace of its own) → route fence →
    bwrap (read-only system, private /tmp, the downloads folder) → chromium "$@"

pasta forwards exactly one port of the namespace's loopback to the proxy on the host's
(`--tcp-ns`); every other destination is unreachable (the hands' ranges and the default route),
so a page cannot reach the host, the LAN or cloud metadata even by talking past the proxy
(WebRTC, a raw address). Chromium's own sandbox is off in this mode: it needs user namespaces,
which the seccomp filter denies; bubblewrap, the filter and the namespace fence the whole
browser instead. The memory limit is watched from outside (the tree's Pss, `tree_rss`):
RLIMIT_AS cannot be used, V8 reserves terabytes of address space it never touches.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from agentd.hands import seccomp
from agentd.hands.sandbox import UNROUTABLE, SandboxUnavailable, network_prefix

_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_MASKED = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/machine-id",
    "/sys/firmware",
    "/sys/devices/virtual/dmi",
)
# What Chromium reads besides /usr and /etc: the font cache (else rebuilt at every start).
_OPTIONAL_RO = ("/var/cache/fontconfig",)
SHM_MB = 256


@dataclass(frozen=True)
class Jail:
    """Where the browser's files live and who it runs as."""

    run_dir: Path  # daemon-private (0700): the wrapper, the filter, the pid file
    downloads: Path  # the one folder the browser writes that outlives it (staging)
    chromium: str = "/usr/bin/chromium"
    bwrap: str = "bwrap"
    run_as: tuple[int, int] | None = None  # (uid, gid) when the daemon runs as root
    proxy_port: int = 0

    @property
    def wrapper(self) -> Path:
        return self.run_dir / "chromium-in-sandbox"


def bwrap_words(jail: Jail) -> list[str]:
    """bwrap's arguments up to the browser (the filter is read from descriptor 9)."""
    argv = [shutil.which(jail.bwrap) or jail.bwrap, "--die-with-parent", "--new-session"]
    argv += ["--cap-drop", "ALL", "--unshare-ipc", "--unshare-pid", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--hostname", "sandbox"]
    for path in ("/usr", "/etc", "/sys", *_OPTIONAL_RO):
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _MASKED:
        if os.path.isdir(path):
            argv += ["--tmpfs", path]
        elif os.path.lexists(path):
            argv += ["--ro-bind", "/dev/null", path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    argv += ["--size", str(SHM_MB << 20), "--tmpfs", "/dev/shm"]
    argv += ["--size", str(512 << 20), "--tmpfs", "/tmp", "--size", str(8 << 20), "--tmpfs", "/run"]
    # Playwright names the downloads folder by its host path: the same path inside.
    argv += ["--bind", str(jail.downloads), str(jail.downloads)]
    argv += ["--seccomp", "9", "--chdir", "/tmp", "--clearenv"]
    for key, value in (("PATH", _PATH), ("HOME", "/tmp"), ("LANG", "C.UTF-8")):
        argv += ["--setenv", key, value]
    return argv


def setpriv_words(ids: tuple[int, int] | None) -> list[str]:
    if ids is None:
        return []
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return [
        setpriv,
        f"--reuid={ids[0]}",
        f"--regid={ids[1]}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def write_wrapper(jail: Jail) -> Path:
    """The executable Playwright runs as the browser; writes the filter beside it."""
    jail.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    filter_path = jail.run_dir / "seccomp.bpf"
    filter_path.write_bytes(seccomp.program())
    prefix = network_prefix(tcp_ns=(jail.proxy_port,), fence_default=True)
    words = [*setpriv_words(jail.run_as), *prefix, *bwrap_words(jail), "--", jail.chromium]
    script = (
        "#!/bin/sh\n"
        "# Written by agentd for Playwright: Chromium in its sandbox (agentd/browser/jail.py).\n"
        f"exec 9< {shlex.quote(str(filter_path))}\n"
        f"export AGENTD_UNROUTABLE={shlex.quote(' '.join(UNROUTABLE))}\n"
        f'exec {shlex.join(words)} "$@"\n'
    )
    path = jail.wrapper
    path.write_text(script)
    path.chmod(0o700)
    return path


def check_tools(jail: Jail) -> None:
    """Raise SandboxUnavailable naming what is missing."""
    if shutil.which(jail.bwrap) is None:
        raise SandboxUnavailable(
            "the browser's sandbox needs bubblewrap: `apt-get install bubblewrap`"
        )
    if not os.access(jail.chromium, os.X_OK):
        raise SandboxUnavailable(
            f"{jail.chromium} is not an executable Chromium: `apt-get install chromium`, or set "
            "[browser] executable"
        )
    seccomp.program()


def probe(run_as: tuple[int, int] | None, bwrap: str = "bwrap") -> str | None:
    """None when the browser's sandbox starts here (bubblewrap, the filter, pasta's namespace
    and its fence), tried with a shell in Chromium's place; else what failed."""
    import subprocess
    import tempfile

    run = Path(tempfile.mkdtemp(prefix="agentd-probe-"))
    staging = Path(tempfile.mkdtemp(prefix="agentd-probe-dl-"))
    try:
        if run_as is not None:
            os.chown(staging, *run_as)
        spec = Jail(run, staging, chromium="/bin/sh", bwrap=bwrap, run_as=run_as, proxy_port=9)
        check_tools(spec)
        wrapper = write_wrapper(spec)
        done = subprocess.run(
            [str(wrapper), "-c", "ip route get 1.1.1.1 >/dev/null 2>&1 || echo fenced"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, SandboxUnavailable, seccomp.SeccompUnavailable) as exc:
        return str(exc)
    except subprocess.TimeoutExpired:
        return "the browser's sandbox did not start within 20 s (pasta cannot make its network?)"
    finally:
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    if done.returncode == 0 and "fenced" in done.stdout:
        return None
    why = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}")[-300:]
    if "tun" in why:
        why += " (pasta needs /dev/net/tun usable by the sandbox's user: chmod 0666 /dev/net/tun)"
    return f"the browser's sandbox fails here: {why}"


def _cmdline(pid: int | str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def carries(pid: int, marker: str) -> bool:
    """Whether process `pid` has `marker` among its arguments (still the browser's)."""
    return marker.encode() in _cmdline(pid).split(b"\0")


def find_root(marker: str) -> int | None:
    """The topmost process with `marker` among its arguments: the browser's tree's root
    (pasta's, in the sandbox: the wrapper execs it with Chromium's arguments)."""
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdecimal() and marker.encode() in _cmdline(entry).split(b"\0"):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            found[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    roots = [pid for pid, parent in found.items() if parent not in found]
    return min(roots) if roots else None


def tree_rss(root: int) -> int:
    """Memory of `root` and every process below it, in bytes (0 when it is gone): each
    process's proportional share (Pss), so the pages Chromium's processes share are counted
    once, not once per process as RSS would."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdecimal():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _pss(pid)
        todo += children.get(pid, [])
    return total


def _pss(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0
