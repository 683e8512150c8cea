"""`agentd run` start-up: what it imports, what it prints, what it does before it is ready."""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.llm.deferred import DeferredLLM
from agentd.llm.types import LLMRequest, LLMResponse
from tests.daemon_process import AGENTD, OWNER, TOKEN, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

HEAVY = ("aiogram", "anthropic", "mcp", "pypdf", "PIL", "onnxruntime", "numpy", "tokenizers")


def test_importing_the_daemon_loads_no_heavy_library() -> None:
    """The daemon module itself is light: aiogram and the SDK load in start-up's threads, the
    rest (documents, MCP, images, local embeddings) when first used."""
    code = "import sys, agentd.daemon; print(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout  # fmt: skip
    loaded = set(eval(out))  # a printed list of names
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)


def test_run_says_starting_and_ready_on_a_terminal_and_answers_the_waiting_message(
    tmp_path: Path,
) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_message(OWNER, OWNER, "waiting since before start-up")
        # The whole SDK (about three times the CPU of the lazy one, which is often ready first
        # now): the waiting message's turn must start without waiting for it.
        env = daemon_env(
            tmp_path, tg.base_url, llm.base_url, AGENTD_STARTUP__LAZY_ANTHROPIC="false"
        )
        master, slave = pty.openpty()
        proc = subprocess.Popen([*AGENTD, "run"], env=env, cwd=tmp_path, stdout=slave,
                                stderr=slave)  # fmt: skip
        os.close(slave)
        try:
            tg.wait_for_sent(1, timeout=60)
            terminal = b""
            while b"ready in" not in terminal:
                terminal += os.read(master, 4096)
            proc.terminate()
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            os.close(master)
    output = terminal.decode()
    human = [line.strip() for line in output.splitlines() if line.startswith("agentd: ")]
    assert human[0].startswith(f"agentd: starting (pid {proc.pid}; config: ")
    assert human[1].startswith("agentd: ready in ") and human[1].endswith(" s as @fake_bot")
    assert len(human) == 2
    # The waiting message was stored and its turn started before the model SDK was ready.
    assert output.index("updates stored") < output.index("agentd running")


def test_no_human_lines_off_a_terminal(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        daemon = Daemon(tmp_path, daemon_env(tmp_path, tg.base_url, llm.base_url)).start()
        assert daemon.stop() == 0
    assert "agentd: " not in daemon.log()  # under systemd the journal gets only the JSON log


def test_missing_secrets_exit_2_before_contacting_telegram(tmp_path: Path) -> None:
    with FakeTelegram.running() as tg:
        for missing in ("ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN"):
            env = {**daemon_env(tmp_path, tg.base_url, "http://127.0.0.1:9"), missing: ""}
            result = Daemon(tmp_path, env).cli("run")
            assert result.returncode == 78, result.stderr  # EX_CONFIG: systemd does not restart
            assert f"{missing} is not set" in result.stderr and "Traceback" not in result.stderr
            assert TOKEN not in result.stderr
        assert tg.calls("getMe") == []


class _Adapter:
    model = "m"

    def __init__(self) -> None:
        self.closed = False

    async def complete(self, req: LLMRequest, on_text=None) -> LLMResponse:  # type: ignore[no-untyped-def]
        return LLMResponse(model=self.model, content=[], stop_reason="end_turn")

    async def close(self) -> None:
        self.closed = True


async def test_deferred_llm_waits_for_the_adapter_and_closes_it() -> None:
    adapter, gate = _Adapter(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def build() -> _Adapter:
        asyncio.run_coroutine_threadsafe(gate.wait(), loop).result(10)
        return adapter

    llm = DeferredLLM("m", build)
    call = asyncio.create_task(llm.complete(LLMRequest(messages=[])))
    await asyncio.sleep(0.05)
    assert not call.done()  # the call waits while the SDK "imports"
    gate.set()
    assert (await call).stop_reason == "end_turn"
    await llm.close()
    assert adapter.closed


async def test_deferred_llm_raises_what_building_raised() -> None:
    def build() -> _Adapter:
        raise ImportError("anthropic is broken")

    llm = DeferredLLM("m", build)
    with pytest.raises(ImportError, match="broken"):
        await llm.ready()
    with pytest.raises(ImportError):
        await llm.complete(LLMRequest(messages=[]))
    await llm.close()  # nothing was built: nothing to close, no error
