"""`[llm]` model choice in the config file: fallbacks, a model per purpose, providers and the
breaker load, and a wrong name stops the start with a message naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.channels import load_config
from agentd.config import ConfigError
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


async def test_local_models_only_need_no_anthropic_key(tmp_path: Path) -> None:
    from agentd.llm import create_llm

    config = _load(
        tmp_path,
        '[llm]\nmodel = "local/qwen"\n[llm.providers.local]\nbase_url = "http://127.0.0.1:9/v1"\n',
    )
    assert config.secrets.anthropic_api_key is None
    llm = create_llm(config)
    try:
        assert [c.ref.label for c in llm.candidates()] == ["local/qwen"]
    finally:
        await llm.close()


def test_a_chain_with_claude_asks_for_the_key(tmp_path: Path) -> None:
    from agentd.llm import LLMError, create_llm

    config = _load(
        tmp_path,
        '[llm]\nmodel = "local/qwen"\nfallbacks = ["claude-haiku-4-5"]\n'
        '[llm.providers.local]\nbase_url = "http://127.0.0.1:9/v1"\n',
    )
    with pytest.raises(LLMError, match="ANTHROPIC_API_KEY is not set"):
        create_llm(config)


def test_a_provider_key_is_read_by_the_one_reader(tmp_path: Path) -> None:
    from agentd.llm.factory import build

    (tmp_path / "agentd.env").write_text("LOCAL_KEY=from-the-file\n")
    (tmp_path / "agentd.env").chmod(0o600)
    config = _load(
        tmp_path,
        '[llm]\nmodel = "gw/m"\n[llm.providers.gw]\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "LOCAL_KEY"\n',
    )
    llm = build(config, env={})
    adapter = llm.candidates()[0].llm
    assert adapter._key == "from-the-file"  # type: ignore[attr-defined]


def test_the_briefing_turns_ask_the_briefing_model() -> None:
    from agentd.chat.names import turn_purpose
    from agentd.schedule.briefing import ONCE_PREFIX, PREFIX

    assert turn_purpose(f"{PREFIX}ab12") == turn_purpose(f"{ONCE_PREFIX}cd34") == "briefing"
    assert turn_purpose(None) == turn_purpose("sched-1") == "turn"


def test_a_missing_openai_package_is_said_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from agentd.llm import LLMError, create_llm

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "openai" else real(name, *a)
    )
    config = _load(
        tmp_path,
        '[llm]\nmodel = "local/qwen"\n[llm.providers.local]\nbase_url = "http://127.0.0.1:9/v1"\n',
    )
    with pytest.raises(LLMError, match=r"pip install 'agentd\[openai\]'"):
        create_llm(config)


async def test_a_custom_anthropic_endpoint_with_no_key_is_not_sent_the_real_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider of kind "anthropic" at its own base_url and no api_key_env is another
    server: it gets a placeholder, never ANTHROPIC_API_KEY (from agentd or, through the SDK's
    own look-up, from the environment). The built-in provider still gets the real key."""
    from agentd.llm.factory import NO_KEY, build
    from agentd.llm.types import LLMError, LLMRequest, Message
    from tests.fakes import FakeAnthropic

    real = "sk-ant-the-owners-real-key-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", real)
    request = LLMRequest(purpose="turn", messages=[Message(role="user", content="hi")])
    with FakeAnthropic.running(api_key=real) as endpoint:  # answers the real key only
        config = _load(
            tmp_path,
            f'[llm]\nmodel = "gw/claude-haiku-4-5"\nbase_url = "{endpoint.base_url}"\n'
            f'[llm.providers.gw]\nkind = "anthropic"\nbase_url = "{endpoint.base_url}"\n',
        )
        config = config.model_copy(update={"secrets": type(config.secrets)(anthropic_api_key=real)})
        gateway = build(config, env={"ANTHROPIC_API_KEY": real}).candidates()[0].llm
        assert gateway._key == NO_KEY  # type: ignore[attr-defined]
        with pytest.raises(LLMError):
            await gateway.complete(request)
        assert endpoint.requests and endpoint.requests[-1]["api_key_present"]
        builtin = _load(
            tmp_path, f'[llm]\nmodel = "claude-haiku-4-5"\nbase_url = "{endpoint.base_url}"\n'
        )
        builtin = builtin.model_copy(
            update={"secrets": type(builtin.secrets)(anthropic_api_key=real)}
        )
        claude = build(builtin, env={}).candidates()[0].llm
        assert (await claude.complete(request)).text
