"""systemd notifications (READY, WATCHDOG, STOPPING) without a dependency."""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    """Send one sd_notify datagram; a no-op (False) when not run by systemd with Type=notify."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract socket namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            # Never block the event loop: a listener that stopped reading costs a ping, not intake.
            sock.setblocking(False)
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Half the watchdog period systemd asked for, in seconds (None when it asked for none)."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2_000_000
    except ValueError:
        return None
