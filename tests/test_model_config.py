"""`[llm]` model choice in the config file: fallbacks, a model per purpose, providers and the
breaker load, and a wrong name stops the start with a message naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.config import ConfigError, load_config
from agentd.config.models import ModelSettings


def _load(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "agentd.toml"
    path.write_text(body)
    return load_config(path, env={})


def test_the_model_keys_load_and_make_the_chains(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        """
[llm]
model = "claude-haiku-4-5"
fallbacks = ["claude-sonnet-4-5", "local/qwen2.5:7b"]
[llm.models]
summary = "local/qwen2.5:7b"
[llm.providers.local]
base_url = "http://127.0.0.1:11434/v1"
local = true
tools = false
[llm.breaker]
interval = 30
""",
    )
    settings = ModelSettings.of(config.llm)
    assert settings.breaker.interval == 30
    assert [r.label for r in settings.chain(config.llm.model)] == [
        "claude-haiku-4-5",
        "claude-sonnet-4-5",
        "local/qwen2.5:7b",
    ]
    assert [r.label for r in settings.chain(config.llm.model, "summary")] == [
        "local/qwen2.5:7b",
        "claude-sonnet-4-5",
    ]
    assert settings.providers["local"].tools is False


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('[llm]\nfallbacks = ["lcoal/qwen"]\n', "llm.fallbacks[0]: 'lcoal/qwen' names no provider"),
        ('[llm.models]\nsumary = "claude-haiku-4-5"\n', "llm.models: Value error, unknown purpose"),
        ('[llm.models]\nfacts = "nope/x"\n', "llm.models.facts: 'nope/x' names no provider"),
        ('[llm]\nmodel = "gone/x"\n', "llm.model: 'gone/x' names no provider 'gone'"),
        ('[llm]\nbackground_model = "gone/x"\n', "llm.background_model: 'gone/x'"),
        ('[llm.providers.local]\nkind = "grpc"\n', "llm.providers.local.kind"),
        ("[llm.breaker]\nfailures = 0\n", "llm.breaker.failures"),
        ('[llm.providers.anthropic]\nkind = "openai"\n', "built-in Messages API provider"),
    ],
)
def test_a_wrong_model_key_is_named(tmp_path: Path, body: str, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, body)
    assert named in str(caught.value)


def test_a_claude_id_needs_no_provider(tmp_path: Path) -> None:
    config = _load(tmp_path, '[llm]\nfallbacks = ["claude-sonnet-4-5"]\n')
    assert ModelSettings.of(config.llm).ref("claude-sonnet-4-5").provider == "anthropic"
