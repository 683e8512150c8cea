"""prompt_cache.py starts its baseline tree with this tree's test harness environment: the
baseline's config must accept every key the harness sets, or the figure's command fails."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agentd.channels import load_config
from tests.daemon_process import OWNER, daemon_env

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _baseline_tree(ref: str, dest: Path) -> Path:
    """The baseline tree's agentd/config.py alone (it imports nothing of agentd's)."""
    shown = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:agentd/config.py"], capture_output=True
    )
    if shown.returncode != 0:
        pytest.skip(f"{ref} is not in this clone's history (a shallow checkout)")
    (dest / "agentd").mkdir(parents=True)
    (dest / "agentd" / "config.py").write_bytes(shown.stdout)
    return dest


def _config_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("baseline_config", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["baseline_config"] = module  # pydantic resolves the annotations through it
    spec.loader.exec_module(module)
    return module


def test_the_baseline_tree_accepts_the_harness_environment(tmp_path: Path) -> None:
    prompt_cache = _script("prompt_cache")
    tree = _baseline_tree(prompt_cache.BASELINE_REF, tmp_path / "old")
    old = _config_module(tree / "agentd" / "config.py")
    env = prompt_cache.baseline_env(daemon_env(tmp_path, "http://tg", "http://llm"))
    config = old.load_config(None, env)
    assert config.telegram.allowed_user_ids == [OWNER, 43]


def test_a_baseline_of_main_reads_the_same_owners(tmp_path: Path) -> None:
    """`--baseline-ref main` runs the same environment: today's tree still reads [telegram]'s
    owner ids, as [access]'s."""
    prompt_cache = _script("prompt_cache")
    env = prompt_cache.baseline_env(daemon_env(tmp_path, "http://tg", "http://llm"))
    config = load_config(None, env)
    assert config.access.allowed_user_ids == [OWNER, 43]
