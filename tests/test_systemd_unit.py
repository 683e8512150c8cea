"""The systemd unit: secrets as credentials, and systemd's own sandbox score."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[1] / "systemd" / "agentd.service"


def _settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_secrets_come_as_credentials_and_the_sandbox_is_on() -> None:
    unit = _settings()
    creds = {value.split(":")[0] for value in unit["LoadCredential"]}
    # The names agentd reads from $CREDENTIALS_DIRECTORY (agentd/config.py).
    assert creds == {"telegram_bot_token", "anthropic_api_key"}
    assert unit["EnvironmentFile"] == ["-/etc/agentd/agentd.env"]  # optional, older installs
    assert unit["CapabilityBoundingSet"] == [""] and unit["NoNewPrivileges"] == ["yes"]
    assert unit["ProtectSystem"] == ["strict"] and unit["ProtectHome"] == ["yes"]
    assert "@system-service" in unit["SystemCallFilter"][0] and unit["MemoryMax"]


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here"
)
def test_systemd_rates_the_unit_well_sandboxed() -> None:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(UNIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for agentd.service: ([0-9.]+)", result.stdout)
    assert match, result.stdout + result.stderr
    # 0 is a fully locked-down service, 10 an unprotected one. What remains is what agentd
    # needs: the network, AF_UNIX, writable-executable memory, and what bubblewrap needs to
    # build the commands' sandbox (namespaces, mounts, a fresh /proc; the unit says why).
    assert float(match[1]) <= 3.0, result.stdout


def test_the_unit_lets_bubblewrap_run() -> None:
    unit = _settings()
    assert unit["PrivateUsers"] == ["no"]
    assert set(unit["RestrictNamespaces"][0].split()) >= {"user", "mnt", "pid", "net"}
    denied = " ".join(v for v in unit["SystemCallFilter"] if v.startswith("~"))
    assert "@mount" not in denied and "@privileged" not in denied
    assert "ProtectProc" not in unit and "ProcSubset" not in unit
    assert "AF_NETLINK" in unit["RestrictAddressFamilies"][0]


def test_doctor_takes_the_units_sandbox_properties() -> None:
    from agentd.hands.unitcheck import check_under_unit, sandbox_properties

    props = sandbox_properties(UNIT.read_text())
    assert "PrivateUsers=no" in props and "ProtectSystem=strict" in props
    assert not any(p.startswith(("ExecStart", "LoadCredential", "Restart")) for p in props)
    if not Path("/run/systemd/system").is_dir():
        works, said = check_under_unit(Path("/nonexistent"), "nobody")
        assert works is None and "could not try it" in said and "systemd is not running" in said


def test_doctor_says_when_skills_add_cannot_write_the_install_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from agentd.skills.capability import _install_folder_problem

    assert _install_folder_problem(tmp_path / "skills") is None
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as under ProtectSystem=strict
    said = _install_folder_problem(tmp_path / "skills")
    assert said is not None and "[skills] paths" in said and "/var/lib/agentd/skills" in said
