"""The sandbox tried under the service's own restrictions (for `agentd doctor`).

A probe run from the owner's shell says nothing about the service: the unit's namespaces,
system-call filter and /proc options decide whether bubblewrap can start there. Where systemd
runs, the probe runs again as a transient unit carrying the installed unit's sandbox
properties (`systemd-run -p …`); elsewhere doctor says it could not check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SYSTEM_UNIT = Path("/etc/systemd/system/agentd.service")
SHIPPED_UNIT = Path(__file__).resolve().parents[2] / "systemd" / "agentd.service"
# The unit settings that shape what a process may do; the rest (ExecStart, Restart…) do not
# matter to the probe.
_SANDBOX_KEYS = frozenset(
    """User Group UMask ProtectSystem ProtectHome ReadWritePaths ReadOnlyPaths InaccessiblePaths
    BindPaths BindReadOnlyPaths PrivateTmp PrivateMounts PrivateDevices PrivateUsers
    PrivateNetwork DevicePolicy DeviceAllow NoNewPrivileges CapabilityBoundingSet
    AmbientCapabilities ProtectKernelTunables ProtectKernelModules ProtectKernelLogs
    ProtectControlGroups ProtectClock ProtectHostname ProtectProc ProcSubset
    RestrictAddressFamilies RestrictNamespaces RestrictRealtime RestrictSUIDSGID RemoveIPC
    LockPersonality SystemCallArchitectures SystemCallFilter SystemCallErrorNumber
    MemoryDenyWriteExecute MemoryMax TasksMax""".split()
)
_PROBE = (
    "import sys; from pathlib import Path; from agentd.hands.sandbox import Sandbox, probe; "
    "why = probe(Sandbox(run_as=sys.argv[2]), Path(sys.argv[1])); "
    "print(why or 'ok'); sys.exit(1 if why else 0)"
)


def sandbox_properties(unit_text: str) -> list[str]:
    """`Key=Value` for each sandbox setting of the unit's [Service] section, in order."""
    found: list[str] = []
    section = ""
    for raw in unit_text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
            continue
        if section != "[Service]" or not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key = line.split("=", 1)[0].strip()
        if key in _SANDBOX_KEYS:
            found.append(line)
    return found


def check_under_unit(workspace: Path, run_as: str) -> tuple[bool | None, str]:
    """(True: works, False: fails, None: could not check) and what to tell the owner."""
    if not Path("/run/systemd/system").is_dir() or shutil.which("systemd-run") is None:
        return None, (
            "could not try it under the service's restrictions: systemd is not running here "
            "(the check above ran outside them)"
        )
    if os.geteuid() != 0:
        return None, (
            "could not try it under the system unit's restrictions without root: run "
            "`sudo agentd doctor` to check the sandbox as the service would run it"
        )
    unit = SYSTEM_UNIT if SYSTEM_UNIT.exists() else SHIPPED_UNIT
    if not unit.exists():
        return None, f"could not try it under the service's restrictions: no {SYSTEM_UNIT}"
    props = [f"--property={p}" for p in sandbox_properties(unit.read_text())]
    argv = [
        "systemd-run",
        "--quiet",
        "--wait",
        "--pipe",
        "--collect",
        "--service-type=exec",
        *props,
        "--",
        sys.executable,
        "-c",
        _PROBE,
        str(workspace),
        run_as,
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"could not try it under {unit}'s restrictions: {exc}"
    said = (done.stdout.strip() or done.stderr.strip())[-400:]
    if done.returncode == 0:
        return True, f"works under {unit}'s restrictions too"
    return False, (
        f"fails under {unit}'s restrictions ({said}); compare the unit with the shipped "
        f"{SHIPPED_UNIT.name}, which lets bubblewrap run"
    )
