"""Whether an installed library's version lies in the range agentd's workarounds were tested on."""

from __future__ import annotations

VersionRange = tuple[tuple[int, int], tuple[int, int]]  # [lowest, first untested) as (major, minor)


def in_range(version: str, tested: VersionRange) -> bool:
    """`version` ("3.31.2") is at least the low end and below the high end of `tested`."""
    try:
        parts = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    low, high = tested
    return low <= parts < high
