"""`agentd audit --kind` knows every kind agentd writes: its help lists them, and asking for one
that has no entry yet finds nothing rather than calling it "not an audit kind"."""

from __future__ import annotations

import ast
from pathlib import Path

from agentd.ledger.audit import KINDS

REPO_ROOT = Path(__file__).resolve().parents[1]


def _named_kinds() -> list[tuple[str, str, bool]]:
    """(kind or its literal start, where, whole) for each `audit.record(conn, KIND, …)`."""
    found = []
    for path in sorted((REPO_ROOT / "agentd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = node.func.value
            name = getattr(receiver, "id", None) or getattr(receiver, "attr", None)
            if node.func.attr != "record" or name not in ("audit", "audit_log"):
                continue
            if len(node.args) < 2:
                continue
            kind, where = node.args[1], f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
            if isinstance(kind, ast.Constant):
                found.append((kind.value, where, True))
            elif isinstance(kind, ast.JoinedStr) and isinstance(kind.values[0], ast.Constant):
                found.append((kind.values[0].value, where, False))
    return found


def test_every_kind_written_is_a_known_kind() -> None:
    named = _named_kinds()
    assert len(named) > 30  # the scan sees the calls
    missing = [
        (kind, where)
        for kind, where, whole in named
        if (kind not in KINDS if whole else not any(k.startswith(kind) for k in KINDS))
    ]
    assert not missing, f"add these to agentd/ledger/audit.py KINDS: {missing}"
