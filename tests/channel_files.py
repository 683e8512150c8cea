"""The files a chat channel touches outside its own package, read from the source: what
`tests/test_channel_own.py` holds to "its package plus one list entry" and
`benchmarks/matrix_channel.py` reports.

Code names a channel when it imports the channel's package, reads its section as an attribute
(`config.matrix`), or names one of the tables its migrations create. Beside the code, a
channel has its page (`docs/<name>.md`, linked from the README and from docs/configuration.md's
table of sections), its row in docs/architecture.md's tier table and its keys in
config.example.toml (each checked by the tests from the channel list, so none is kept by hand
in a second place without a check), and, if it needs a library, an optional extra in
pyproject.toml.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from agentd.channels import channels, packages
from agentd.chat.channel import Channel
from agentd.db.migrations import Migration

ROOT = Path(__file__).resolve().parents[1]


def tables(channel: Channel) -> set[str]:
    """The tables a channel's own migrations create."""
    found: set[str] = set()
    for step in channel.migrations:
        sql = step.sql if isinstance(step, Migration) else step[1]
        found |= set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", sql))
    return found


def _names(tree: ast.AST, package: str, section: str, own_tables: set[str]) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules.append(node.module)
                if node.module == "agentd":
                    modules += [f"agentd.{a.name}" for a in node.names]
            if any(m == f"agentd.{package}" or m.startswith(f"agentd.{package}.") for m in modules):
                return True
        elif isinstance(node, ast.Attribute) and node.attr == section:
            return True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(re.search(rf"\b{t}\b", node.value) for t in own_tables):
                return True
    return False


def code_naming(channel: Channel, package: str) -> list[str]:
    """agentd's modules outside the channel's package that name it (repository paths)."""
    found = []
    for path in sorted((ROOT / "agentd").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[1] == package:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if _names(tree, package, channel.section.name, tables(channel)):
            found.append(str(rel))
    return found


@dataclass(frozen=True)
class Touched:
    """What one channel touches outside its package."""

    name: str
    code: list[str]  # agentd modules naming it: the list entry, and nothing else
    docs: list[str]  # its page and the lines that point at it, its keys in config.example.toml
    extra: bool  # an optional dependency group named after it in pyproject.toml

    @property
    def files(self) -> int:
        return len(self.code) + len(self.docs) + int(self.extra)


def touched(channel: Channel, package: str) -> Touched:
    docs = []
    if (ROOT / "docs" / f"{channel.name}.md").is_file():
        docs.append(f"docs/{channel.name}.md")
    if re.search(rf"^\| \d+ \| `{package}/` \|", _read("docs/architecture.md"), re.M):
        docs.append("docs/architecture.md")
    if re.search(rf"^#? ?\[{channel.section.name}\]", _read("config.example.toml"), re.M):
        docs.append("config.example.toml")
    line = f"| `[{channel.section.name}]` | [{channel.name}.md]({channel.name}.md) |"
    if line in _read("docs/configuration.md"):
        docs.append("docs/configuration.md")
    if f"(docs/{channel.name}.md)" in _read("README.md"):
        docs.append("README.md")
    project = tomllib.loads(_read("pyproject.toml"))["project"]
    extra = channel.name in project.get("optional-dependencies", {})
    return Touched(channel.name, code_naming(channel, package), docs, extra)


def every_channel() -> list[Touched]:
    return [touched(c, p) for c, p in zip(channels(), packages(), strict=True)]


def _read(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")
