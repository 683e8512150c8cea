"""Every skill's state in one list, for `agentd skills ls`, `agentd doctor` and /skills."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from agentd.skills.catalog import Catalog
from agentd.skills.store import SkillRecord, drift

State = Literal["enabled", "changed", "disabled", "not enabled", "invalid", "missing"]


class SkillState(BaseModel):
    name: str
    state: State
    description: str = ""
    path: str = ""
    scripts: int = 0
    reason: str = ""  # why it is invalid, changed or missing; warnings of a valid one
    content_hash: str = ""


def overview(catalog: Catalog, records: dict[str, SkillRecord]) -> list[SkillState]:
    """Skills found, skills recorded and folders that are not skills, by name."""
    out: list[SkillState] = []
    for name, found in catalog.skills.items():
        record = records.get(name)
        state: State = "not enabled"
        reason = "; ".join(found.warnings)
        if record is not None:
            why = drift(record, catalog) if record.status == "enabled" else record.change_note
            if record.status == "disabled":
                state = "disabled"
            elif why or record.status == "changed":
                state, reason = "changed", why or "its files changed since you enabled it"
            else:
                state = "enabled"
        out.append(
            SkillState(
                name=name,
                state=state,
                description=found.manifest.description,
                path=str(found.path),
                scripts=len(found.scripts),
                reason=reason,
                content_hash=found.content_hash,
            )
        )
    for name, record in records.items():
        if name not in catalog.skills:
            out.append(
                SkillState(
                    name=name,
                    state="missing",
                    description=record.description,
                    path=record.path,
                    reason=drift(record, catalog),
                )
            )
    for bad in catalog.invalid:
        out.append(
            SkillState(name=bad.path.name, state="invalid", path=str(bad.path), reason=bad.reason)
        )
    return sorted(out, key=lambda s: (s.name, s.path))
