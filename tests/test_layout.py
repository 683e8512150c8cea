"""The layout's rules of the road (docs/architecture.md), checked on the source itself.

- Dependencies point one way: each package sits in a tier and imports only from lower tiers,
  lazy imports inside functions included (they are dependencies all the same).
- No module-level import circle.
- A name that several packages must spell alike (the turn workflow, the chat key) is defined
  once, and every workflow name is a constant defined in one place.
"""

from __future__ import annotations

import ast
import functools
import gc
import re
from collections import defaultdict
from pathlib import Path

from agentd.channels import packages as channel_packages

ROOT = Path(__file__).resolve().parents[1] / "agentd"

# Bottom to top. A package may import from strictly lower tiers only.
TIERS: list[tuple[str, ...]] = [
    ("parsing",),  # outside data parsed in a bounded child process
    ("runtime", "ledger", "net"),  # process plumbing, what things cost, outbound HTTP
    ("config",),
    ("db",),
    ("durable",),
    ("chat",),  # where a message is and how it leaves: what every layer above may name
    ("llm", "access", "retention", "retrieval"),
    ("tools",),
    ("knowledge", "memory", "web", "hands", "mail", "calendar"),
    ("media", "skills", "browser"),
    ("agent", "commands"),
    ("schedule", "tasks"),
    ("automations", "watch"),  # the owner's own workflows; watches: quiet check-ins
    tuple(channel_packages()),  # each chat channel's adapter, listed in agentd/channels/
    ("dashboard",),  # the owner's web pages: read below, served by the daemon or the CLI
    ("channels",),  # the one list of chat channels the daemon and doctor loop over
    ("daemon",),
    ("cli",),
]
TIER = {package: rank for rank, packages in enumerate(TIERS) for package in packages}


def _doc_tiers() -> dict[str, int]:
    """The tier table of docs/architecture.md, as {package: tier}."""
    text = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `([a-z_]+)(?:/|\.py)` \|", text, re.MULTILINE)
    return {package: int(tier) for tier, package in rows}


def test_the_documented_tiers_are_these() -> None:
    """docs/architecture.md shows the same tiers as TIERS: one table, checked both ways."""
    assert _doc_tiers() == TIER, "make docs/architecture.md's table match TIERS (tier numbers)"


def _package_of(path: Path) -> str | None:
    rel = path.relative_to(ROOT)
    if len(rel.parts) == 1:
        return None if rel.name in ("__init__.py", "__main__.py") else rel.stem
    return rel.parts[0]


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module == "agentd":
            return [f"agentd.{a.name}" for a in node.names]
        return [node.module]
    return []


def _sources() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


@functools.cache
def _parse(path: Path) -> ast.Module:
    # CPython 3.11.7's compiler raises "AST constructor recursion depth mismatch" when a
    # finalizer (an earlier test's destroyed asyncio task logging) runs inside ast.parse.
    gc.disable()
    try:
        return ast.parse(path.read_text())
    finally:
        gc.enable()


def test_every_package_has_a_tier_and_says_its_concern() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} | {"config"}
    assert packages == set(TIER), "add the package to TIERS and docs/architecture.md"
    for package in packages - {"config"}:
        doc = ast.get_docstring(_parse(ROOT / package / "__init__.py"))
        assert doc and len(doc) > 30, f"agentd/{package}/__init__.py says what it is for"


def test_dependencies_point_one_way() -> None:
    wrong: list[str] = []
    for path in _sources():
        package = _package_of(path)
        if package is None:
            continue
        for node in ast.walk(_parse(path)):
            for name in _imported(node):
                parts = name.split(".")
                if parts[0] != "agentd" or len(parts) < 2 or parts[1] not in TIER:
                    continue
                target = parts[1]
                if target != package and TIER[target] >= TIER[package]:
                    rel = path.relative_to(ROOT.parent)
                    wrong.append(f"{rel}:{node.lineno} ({package}) imports {name} ({target})")
    assert not wrong, "imports against the tiers:\n" + "\n".join(wrong)


def _top_level_imports(tree: ast.Module) -> list[ast.AST]:
    """What runs at import: the body and its if/try blocks, not `if TYPE_CHECKING`."""
    out: list[ast.AST] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                stack.extend(node.body)
            stack.extend(node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend([*node.body, *node.orelse, *node.finalbody])
            for handler in node.handlers:
                stack.extend(handler.body)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
    return out


def _module_graph() -> dict[str, set[str]]:
    modules = {}
    for path in _sources():
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for node in _top_level_imports(_parse(path)):
            names = _imported(node)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` depends on pkg.sub when sub is a module
                names += [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if name and name != module and not module.startswith(name + "."):
                    graph[module].add(name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_in_a_circle() -> None:
    assert _cycles(_module_graph()) == []


def test_the_cycle_check_can_fail() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_workflow_names_and_chat_keys_are_defined_once() -> None:
    constants: dict[str, list[str]] = defaultdict(list)
    for path in _sources():
        rel = str(path.relative_to(ROOT.parent))
        tree = _parse(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.endswith("_WORKFLOW"):
                        constants[node.value.value].append(f"{rel}:{target.id}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "workflow":
                assert node.args and not isinstance(node.args[0], ast.Constant), (
                    f"{rel}:{node.lineno}: name the workflow by its constant"
                )
        if rel != "agentd/chat/names.py":
            assert 'f"chat-{' not in path.read_text(), f"{rel}: use chat.names.chat_key"
    assert "turn" in constants
    assert {name: where for name, where in constants.items() if len(where) > 1} == {}
