"""Loading automations: every `*.py` in `[automations] folder`, and `modules` by import path.

A file that cannot be loaded, or declares a bad workflow, is a problem (logged, and shown by
`agentd workflows start`); the others load as usual, exactly like tool plugins.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ValidationError

from agentd.automations.api import Automation, field_errors
from agentd.config import Config
from agentd.durable import InvalidInput, WorkflowNotFound

log = logging.getLogger("agentd.automations")
RELOAD_WORKFLOW = "automations_reload"  # `agentd automations reload`: the daemon loads again


def _version_key(version: str) -> tuple[int, int, str]:
    # Numeric versions compare as numbers ("10" after "9"); fingerprints sort after them.
    return (0, int(version), "") if version.isdecimal() else (1, 0, version)


@dataclass
class Catalog:
    """Every loaded automation by name and version; new instances start on the newest."""

    versions: dict[str, dict[str, Automation]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, auto: Automation, reserved: Iterable[str] = ()) -> None:
        if auto.name in set(reserved):
            self.problems.append(f"{auto.source}: {auto.name!r} is a built-in workflow's name")
            return
        known = self.versions.setdefault(auto.name, {})
        if auto.version in known:
            self.problems.append(
                f"{auto.source}: workflow {auto.name!r} version {auto.version} is declared "
                f"twice (also in {known[auto.version].source}); the first one is used"
            )
            return
        known[auto.version] = auto

    def names(self) -> list[str]:
        return sorted(self.versions)

    def current(self, name: str) -> Automation:
        known = self.versions.get(name)
        if not known:
            listed = ", ".join(self.names()) or "none are loaded; see [automations] folder"
            raise WorkflowNotFound(f"no automation named {name!r} (known: {listed})")
        return known[max(known, key=_version_key)]

    def get(self, name: str, version: str) -> Automation | None:
        return self.versions.get(name, {}).get(version)

    def validated_input(self, name: str, payload: object) -> tuple[Automation, str]:
        """The newest version and the input as stored JSON; InvalidInput names each field."""
        auto = self.current(name)
        try:
            raw = _kept(auto.input_model, auto.input_model.model_validate(payload))
        except ValidationError as exc:
            raise InvalidInput(f"invalid input for {name}: {field_errors(exc)}") from None
        return auto, raw

    def validated_event(
        self, name: str, version: str, event: str, data: dict[str, Any]
    ) -> dict[str, Any]:
        """The event's data as its declared model reads it; InvalidInput names each field, or
        the events the automation takes when it declares none by this name. An automation that
        declares no events (or is not loaded here) takes any data as it is."""
        auto = self.get(name, version) or (self.current(name) if name in self.versions else None)
        if auto is None or not auto.events:
            return data
        model = auto.events.get(event)
        if model is None:
            takes = ", ".join(sorted(auto.events))
            raise InvalidInput(f"{name} waits for no event {event!r}; it takes: {takes}")
        try:
            return json.loads(_kept(model, model.model_validate(data), by_alias=True))
        except ValidationError as exc:
            raise InvalidInput(f"invalid {event} for {name}: {field_errors(exc)}") from None


def _kept(model: type[BaseModel], value: BaseModel, *, by_alias: bool | None = None) -> str:
    """`value` as the journal keeps it, checked to read back as the model: a number JSON has
    no room for (1e400 parses as infinity, NaN) is stored as null and would fail only when the
    run reads it, after the sender was told it was taken (ValidationError naming the field)."""
    raw = value.model_dump_json(by_alias=by_alias)
    model.model_validate_json(raw)
    return raw


def _load_file(path: Path) -> ModuleType:
    # A private module name per file, so two folders' "ci.py" never collide in sys.modules.
    module_name = f"agentd_automation_{path.stem}_{abs(hash(str(path.resolve()))):x}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pydantic look the module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _modules(config: Config) -> list[tuple[str, ModuleType | BaseException]]:
    loaded: list[tuple[str, ModuleType | BaseException]] = []
    folder = config.automations.folder
    if folder:
        root = Path(folder).expanduser()
        if not root.is_dir():
            loaded.append((str(root), FileNotFoundError(f"{root} is not a folder")))
        else:
            for path in sorted(root.glob("*.py")):
                if path.name.startswith("_"):
                    continue
                try:
                    loaded.append((str(path), _load_file(path)))
                except (Exception, SystemExit) as exc:
                    loaded.append((str(path), exc))
    for name in config.automations.modules:
        try:
            loaded.append((name, importlib.import_module(name)))
        except (Exception, SystemExit) as exc:
            loaded.append((name, exc))
    return loaded


def builtin_names() -> tuple[str, ...]:
    """The daemon's own workflows: an automation may not take one of their names."""
    from agentd.chat.names import TURN_WORKFLOW
    from agentd.commands.router import COMMAND_WORKFLOW
    from agentd.media.chatdocs import INGEST_WORKFLOW
    from agentd.memory.summarise import SUMMARY_WORKFLOW
    from agentd.retention.workflow import RETENTION_WORKFLOW
    from agentd.schedule.store import OCCURRENCE_WORKFLOW

    return (
        TURN_WORKFLOW,
        COMMAND_WORKFLOW,
        INGEST_WORKFLOW,
        SUMMARY_WORKFLOW,
        RETENTION_WORKFLOW,
        OCCURRENCE_WORKFLOW,
        RELOAD_WORKFLOW,
    )


def load_catalog(config: Config, reserved: Iterable[str] = ()) -> Catalog:
    """Load every configured automation; failures become problems and never raise."""
    catalog = Catalog()
    reserved = set(reserved)
    for source, module in _modules(config):
        if isinstance(module, BaseException):
            first = (str(module).strip().splitlines() or [""])[0][:300]
            catalog.problems.append(f"{source}: {type(module).__name__}: {first}")
            log.warning("automation failed to load", exc_info=module, extra={"source": source})
            continue
        found = [obj for obj in vars(module).values() if isinstance(obj, Automation)]
        if not found:
            catalog.problems.append(f"{source}: declares no @workflow")
        for auto in found:
            catalog.add(replace(auto, source=source), reserved)
    for problem in catalog.problems:
        log.warning("automation problem", extra={"problem": problem})
    return catalog
