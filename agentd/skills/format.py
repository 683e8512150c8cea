"""SKILL.md as the Agent Skills specification publishes it (agentskills.io/specification).

YAML front matter between `---` lines, then Markdown instructions. Required: `name` (1-64
characters: lowercase letters, digits and single hyphens, not at either end; it should match the
folder's name) and `description` (1-1024 characters). Optional: `license`, `compatibility`
(1-500 characters), `metadata` (a map of strings), `allowed-tools` (a space-separated string or
a list of strings). Unknown fields are kept and shown, never fatal.

The YAML is read by PyYAML's safe loader with aliases refused: a real skill needs none, and an
alias is how a few hundred bytes of front matter become gigabytes when printed.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import yaml
from pydantic import BaseModel, Field

NAME_MAX = 64
DESCRIPTION_MAX = 1024
COMPATIBILITY_MAX = 500
# Far above any real front matter; bounds the parser's work on a hostile file.
FRONT_MATTER_MAX = 32 * 1024
KNOWN_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")


class SkillFormatError(ValueError):
    """SKILL.md does not follow the format; the message says what to fix."""


class Manifest(BaseModel):
    """A skill's front matter, validated, and its instructions."""

    name: str
    description: str
    license: str = ""
    compatibility: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)
    allowed_tools: list[str] = Field(default_factory=list)
    # Fields the specification does not define, as short texts (kept, shown, never used).
    extra: dict[str, str] = Field(default_factory=dict)
    body: str = ""


class _NoAliasLoader(yaml.SafeLoader):
    """The safe loader, refusing anchors' aliases (a YAML bomb needs them)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not accepted in a skill", event.start_mark
            )
        return super().compose_node(parent, index)


def split_front_matter(text: str) -> tuple[str, str]:
    """(front matter, body) of a SKILL.md; raises SkillFormatError when there is none."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillFormatError("SKILL.md must start with YAML front matter: a line '---'")
    size = 0
    for n, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "".join(lines[1:n]), "".join(lines[n + 1 :]).strip()
        size += len(line)
        if size > FRONT_MATTER_MAX:
            raise SkillFormatError(f"the front matter is over {FRONT_MATTER_MAX} characters")
    raise SkillFormatError("the front matter is not closed by a line '---'")


def _load_yaml(front: str) -> dict[str, Any]:
    try:
        data = yaml.load(front, Loader=_NoAliasLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 2})" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SkillFormatError(f"the front matter is not valid YAML{at}: {problem}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise SkillFormatError("the front matter nests too deeply") from None
    if not isinstance(data, dict):
        raise SkillFormatError("the front matter must be a YAML mapping (key: value lines)")
    return data


def check_name(name: object) -> str:
    """The name, NFKC-normalised, or SkillFormatError saying which rule it breaks."""
    if not isinstance(name, str) or not name.strip():
        raise SkillFormatError("'name' is required and must be a non-empty string")
    name = unicodedata.normalize("NFKC", name.strip())
    if len(name) > NAME_MAX:
        raise SkillFormatError(f"'name' is {len(name)} characters; at most {NAME_MAX}")
    if name != name.lower():
        raise SkillFormatError(f"'name' {name!r} must be lowercase")
    if not all(c.isalnum() or c == "-" for c in name):
        raise SkillFormatError(f"'name' {name!r} may hold only letters, digits and hyphens")
    if name.startswith("-") or name.endswith("-") or "--" in name:
        raise SkillFormatError(
            f"'name' {name!r} must not start or end with a hyphen or hold two in a row"
        )
    return name


def _text(data: dict[str, Any], key: str, limit: int | None, *, required: bool) -> str:
    value = data.get(key)
    if value is None:
        if required:
            raise SkillFormatError(f"'{key}' is required")
        return ""
    if not isinstance(value, str) or not value.strip():
        raise SkillFormatError(f"'{key}' must be a non-empty string")
    if limit is not None and len(value) > limit:
        raise SkillFormatError(f"'{key}' is {len(value)} characters; at most {limit}")
    return value.strip()


def _scalar(value: object) -> str | None:
    if isinstance(value, str | int | float | bool):
        return str(value)
    return None


def _metadata(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SkillFormatError("'metadata' must be a mapping of keys to strings")
    out = {}
    for key, item in value.items():
        text = _scalar(item)
        if text is None:
            raise SkillFormatError(f"'metadata.{key}' must be a string, not a nested value")
        out[str(key)] = text
    return out


def _allowed_tools(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise SkillFormatError("'allowed-tools' must be a space-separated string or a list of strings")


def _extra(data: dict[str, Any]) -> dict[str, str]:
    extra = {}
    for key, value in data.items():
        if key in KNOWN_FIELDS:
            continue
        # Kept for display only; aliases are refused, so the value is as big as the text.
        shown = _scalar(value) if _scalar(value) is not None else repr(value)
        extra[str(key)[:64]] = shown[:200]
    return extra


def parse_skill_md(text: str) -> Manifest:
    """Parse and validate a SKILL.md; raises SkillFormatError with the reason."""
    front, body = split_front_matter(text)
    data = _load_yaml(front)
    return Manifest(
        name=check_name(data.get("name")),
        description=_text(data, "description", DESCRIPTION_MAX, required=True),
        license=_text(data, "license", None, required=False),
        compatibility=_text(data, "compatibility", COMPATIBILITY_MAX, required=False),
        metadata=_metadata(data.get("metadata")),
        allowed_tools=_allowed_tools(data.get("allowed-tools")),
        extra=_extra(data),
        body=body,
    )
