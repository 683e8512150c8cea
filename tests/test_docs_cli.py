"""`agentd ingest` and `agentd docs ls|rm|search`, through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentd.cli.app import app
from tests.fakes.site import FakeSite

runner = CliRunner()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "agentd.toml"
    path.write_text(
        f'[storage]\npath = "{tmp_path / "agentd.db"}"\n\n'
        '[tools.fetch]\nallowed_hosts = ["127.0.0.1"]\n'
    )
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "notes"
    docs.mkdir()
    (docs / "home.md").write_text("# Home\n\n## Wifi\n\nThe wifi password is on the fridge.\n")
    (docs / "car.txt").write_text("The car is due for service in March.")
    (docs / "bad.txt").write_bytes(b"\xff\xfe\xfa")
    return docs


def _run(config: Path, *args: str, code: int = 0) -> Any:
    result = runner.invoke(app, [*args, "--config", str(config)], env={"COLUMNS": "250"})
    assert result.exit_code == code, result.output
    return result


def _json(config: Path, *args: str) -> Any:
    return json.loads(_run(config, *args, "--json").stdout)


def test_ingest_ls_search_rm(config: Path, folder: Path) -> None:
    # bad.txt is not ingested, so the exit code is 1 (not 0), after the report.
    report = json.loads(_run(config, "ingest", str(folder), "--json", code=1).stdout)
    assert sorted(Path(s).name for s in report["added"]) == ["car.txt", "home.md"]
    assert report["failed"][0]["reason"].startswith("not valid UTF-8")
    assert report["chunks_embedded"] == 2

    table = _run(config, "ingest", str(folder), code=1).stdout
    assert "unchanged" in table and "Not ingested" in table and "bad.txt" in table

    listed = _json(config, "docs", "ls")
    bad = listed.pop(0)  # not read, so stored as failed with the reason, and nothing to search
    assert (Path(bad["source"]).name, bad["status"], bad["chunks"]) == ("bad.txt", "failed", 0)
    assert bad["error"].startswith("not valid UTF-8")
    docs = listed
    assert [(d["title"], d["chunks"], d["status"]) for d in docs] == [
        ("car.txt", 1, "ingested"),
        ("Home", 1, "ingested"),
    ]
    car = "The car is due for service in March."
    assert (docs[0]["text_chars"], docs[0]["kept_chars"]) == (len(car), len(car))
    assert docs[0]["tokens"] == (len(car) + 3) // 4 and "raw_text" not in docs[0]
    table = _run(config, "docs", "ls").stdout
    assert "failed" in table and "not valid UTF-8" in table and "ingested" in table

    hits = _json(config, "docs", "search", "wifi password")
    assert (hits[0]["title"], hits[0]["section"]) == ("Home", "Wifi")
    assert "Wifi" in _run(config, "docs", "search", "wifi", "-k", "1").stdout

    assert _json(config, "docs", "rm", str(docs[0]["id"])) == {"removed": [docs[0]["source"]]}
    removed = _json(config, "docs", "rm", str(folder))["removed"]
    assert sorted(removed) == sorted([bad["source"], docs[1]["source"]])
    assert _json(config, "docs", "ls") == []
    assert "no document" in _run(config, "docs", "rm", "nothing-here", code=1).output


def test_ingest_needs_something_to_ingest(config: Path) -> None:
    result = _run(config, "ingest", code=2)
    assert "--urls FILE or --sitemap URL" in result.output


def test_ingest_a_sitemap_from_the_cli(config: Path) -> None:
    with FakeSite.running() as site:
        site.page("/a", "<h1>A</h1><h2>Hours</h2><p>Open nine to five.</p>", title="Shop")
        report = _json(config, "ingest", "--sitemap", site.url("/sitemap.xml"))
    assert report["added"] == [site.url("/a")]
    hit = _json(config, "docs", "search", "opening hours")[0]
    assert (hit["source"], hit["section"], hit["kind"]) == (site.url("/a"), "Hours", "url")


def test_the_cli_does_not_import_the_telegram_or_llm_stacks(config: Path, folder: Path) -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from agentd.cli.app import app\n"
        f"r = CliRunner().invoke(app, ['ingest', {str(folder)!r}, '-c', {str(config)!r}])\n"
        "assert r.exit_code == 1, r.output  # bad.txt is not ingested\n"
        "print([m for m in ('aiogram', 'anthropic') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
