"""The sandbox's seccomp filter: the system calls a command never needs and an attacker wants.

Compiled with libseccomp (through pyseccomp) to the BPF program bwrap's `--seccomp FD` loads
just before it runs the command. Everything not listed is allowed; a denied call fails with
EPERM (ENOSYS for clone3, so libc falls back to clone, whose flags the filter can read).
Denied, and why:
- new namespaces (unshare, setns, clone with a CLONE_NEW* flag): a nested user namespace gives
  a process every capability inside it, the kernel's largest attack surface for a local user;
- io_uring: a second way to make system calls that seccomp cannot see, and a history of bugs;
- userfaultfd: the classic tool for winning kernel races;
- bpf, perf_event_open: kernel programs and performance counters (side channels, bugs);
- keyctl, add_key, request_key: the kernel keyring is not namespaced;
- mount, umount2, pivot_root, open_tree, move_mount, fsopen…: no mount changes inside;
- kexec, modules, swap, reboot, ptrace of other programs' memory via process_vm_*: nothing a
  command needs (capabilities are dropped too; this is the second fence).
Calls made through a foreign architecture's ABI (32-bit int 0x80 on x86-64) kill the process:
the filter only speaks the native one.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

_CLONE_NEW = {
    "CLONE_NEWTIME": 0x00000080,
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
DENIED = (
    "unshare",
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "reboot",
    "process_vm_readv",
    "process_vm_writev",
    "open_by_handle_at",
    "name_to_handle_at",
    "syslog",
    "acct",
)


class SeccompUnavailable(RuntimeError):
    """libseccomp cannot be loaded; the message says how to install it."""


@functools.cache
def program() -> bytes:
    """The compiled filter (BPF bytes), built once per process."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # the module loads libseccomp.so.2 when imported
        raise SeccompUnavailable(
            f"the sandbox's seccomp filter cannot be built ({exc}): `apt-get install "
            "libseccomp2`, then `pip install pyseccomp`"
        ) from None
    flt = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        _add(flt, deny, name)
    # clone3 passes its flags in memory the filter cannot read: make libc fall back to clone.
    _add(flt, sc.ERRNO(errno.ENOSYS), "clone3")
    for flag in _CLONE_NEW.values():
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    with tempfile.TemporaryFile() as out:  # libseccomp writes to a descriptor
        flt.export_bpf(out)
        out.seek(0)
        return out.read()


def _add(flt: object, action: int, name: str) -> None:
    try:
        flt.add_rule(action, name)  # type: ignore[attr-defined]
    except (OSError, ValueError, RuntimeError):
        pass  # a call this architecture or libseccomp does not know cannot be made either


def memfd() -> int:
    """A fresh descriptor holding the program at offset 0, for `bwrap --seccomp FD`."""
    return data_fd("agentd-seccomp", program())


def data_fd(name: str, data: bytes) -> int:
    """A memory file holding `data`, read from its start (bwrap's --seccomp, --ro-bind-data)."""
    # Close-on-exec like every descriptor: run_sandboxed hands it to bwrap alone (pass_fds).
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
