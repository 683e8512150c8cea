"""Loading automations from a folder: what loads, what is a problem (and says why), which
version new instances start on, and input errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentd.automations import AutoStep, workflow
from agentd.automations.catalog import builtin_names, load_catalog
from agentd.config import AutomationsConfig, Config
from agentd.durable import InvalidInput, WorkflowNotFound

GOOD = """
from pydantic import BaseModel
from agentd.automations import AutoStep, workflow

class In(BaseModel):
    repo: str
    count: int = 1

class Out(BaseModel):
    ok: bool

@workflow("deploy", input=In, output=Out, version={version})
async def deploy(step: AutoStep, inp: In) -> Out:
    return Out(ok=True)
"""


def catalog_of(tmp_path: Path, files: dict[str, str]):  # type: ignore[no-untyped-def]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    config = Config(automations=AutomationsConfig(folder=str(tmp_path)))
    return load_catalog(config, builtin_names())


def test_versions_load_side_by_side_and_the_newest_starts(tmp_path: Path) -> None:
    catalog = catalog_of(
        tmp_path, {"a.py": GOOD.format(version=9), "b.py": GOOD.format(version=10)}
    )
    assert catalog.problems == []
    assert sorted(catalog.versions["deploy"]) == ["10", "9"]
    assert catalog.current("deploy").version == "10"  # numbers compare as numbers
    assert catalog.get("deploy", "9") is not None and catalog.get("deploy", "8") is None


def test_problems_name_the_file_and_the_cause(tmp_path: Path) -> None:
    catalog = catalog_of(
        tmp_path,
        {
            "broken.py": "def oops(:\n",
            "empty.py": "X = 1\n",
            "twice.py": GOOD.format(version=1),
            "twice_again.py": GOOD.format(version=1),
            "clash.py": GOOD.format(version=1).replace('"deploy"', '"turn"'),
            "_private.py": "raise SystemExit('never loaded')\n",
        },
    )
    text = "\n".join(catalog.problems)
    assert "broken.py: SyntaxError" in text
    assert "empty.py: declares no @workflow" in text
    assert "version 1 is declared twice" in text
    assert "'turn' is a built-in workflow's name" in text
    assert "_private" not in text and catalog.names() == ["deploy"]


def test_input_errors_name_each_field(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path, {"a.py": GOOD.format(version=1)})
    with pytest.raises(InvalidInput) as caught:
        catalog.validated_input("deploy", {"count": "many"})
    assert "repo: Field required" in str(caught.value)
    assert "count: Input should be a valid integer" in str(caught.value)
    _, raw = catalog.validated_input("deploy", {"repo": "me/app"})
    assert raw == '{"repo":"me/app","count":1}'
    with pytest.raises(WorkflowNotFound, match="known: deploy"):
        catalog.current("nope")


PAY = """
from pydantic import BaseModel
from agentd.automations import AutoStep, workflow

class Pay(BaseModel):
    amount: float

class Refund(BaseModel):
    amount: float

@workflow("pay", input=Pay, output=Pay, version=1, events={{"refund": Refund}})
async def pay(step: AutoStep, inp: Pay) -> Pay:
    return inp
"""


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_number_the_journal_cannot_keep_is_refused_at_the_door(
    tmp_path: Path, number: float
) -> None:
    """1e400 and NaN are JSON a webhook sender may write (Python reads them as infinity and
    NaN); the model takes them, the journal would keep null and the run would fail after the
    sender was told it was taken. Refused before, naming the field, for a start and an event."""
    catalog = catalog_of(tmp_path, {"pay.py": PAY.format()})
    with pytest.raises(InvalidInput, match="amount"):
        catalog.validated_input("pay", {"amount": number})
    with pytest.raises(InvalidInput, match="amount"):
        catalog.validated_event("pay", "1", "refund", {"amount": number})
    assert json.loads(catalog.validated_input("pay", {"amount": 1e300})[1]) == {"amount": 1e300}
    assert catalog.validated_event("pay", "1", "refund", {"amount": 2}) == {"amount": 2.0}


def test_a_missing_folder_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    config = Config(automations=AutomationsConfig(folder=str(tmp_path / "nowhere")))
    assert "is not a folder" in load_catalog(config).problems[0]


def test_workflow_declarations_are_checked() -> None:
    class M(BaseModel):
        pass

    with pytest.raises(TypeError, match="use 1-48 of a-z"):
        workflow("Bad Name", input=M, output=M)
    with pytest.raises(TypeError, match="pydantic model"):
        workflow("ok", input=dict, output=M)  # type: ignore[arg-type]

    def not_async(step: AutoStep, inp: M) -> M:
        return inp

    with pytest.raises(TypeError, match="async def"):
        workflow("ok", input=M, output=M)(not_async)  # type: ignore[arg-type]

    async def edited(step: AutoStep, inp: M) -> M:
        return inp

    unversioned = workflow("ok", input=M, output=M)(edited)
    assert unversioned.version.startswith("src-")  # the source's fingerprint


def test_an_input_over_the_engine_limit_is_refused(tmp_path: Path) -> None:
    from agentd.automations import runs
    from agentd.db import open_sync
    from agentd.db.migrations import apply_migrations

    catalog = catalog_of(tmp_path, {"a.py": GOOD.format(version=1)})
    conn = open_sync(tmp_path / "t.db")
    apply_migrations(conn)
    with pytest.raises(InvalidInput, match="bytes, over"):
        runs.start(
            conn,
            catalog,
            "deploy",
            {"repo": "x" * (runs.MAX_INPUT_BYTES + 1)},
            instance_id="big",
            source="cli",
            now=0.0,
        )
    assert conn.execute("SELECT COUNT(*) FROM workflow_instances").fetchone()[0] == 0
    runs.start(conn, catalog, "deploy", {"repo": "r"}, instance_id="ok", source="cli", now=0.0)
    with pytest.raises(ValueError, match="event data over"):
        runs.signal(conn, "ok", "go", {"blob": "x" * runs.MAX_INPUT_BYTES}, 0.0)
    conn.close()


def test_an_input_is_stored_as_its_model_writes_it(tmp_path: Path) -> None:
    """A model that writes its fields by alias (camelCase for a JSON caller) is journaled so."""
    camel = """
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from agentd.automations import AutoStep, workflow

class Call(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True
    )
    call_session_id: str

@workflow("call", input=Call, output=Call, version=1)
async def call(step: AutoStep, inp: Call) -> Call:
    return inp
"""
    catalog = catalog_of(tmp_path, {"call.py": camel})
    assert catalog.validated_input("call", {"callSessionId": "c1"})[1] == '{"callSessionId":"c1"}'
