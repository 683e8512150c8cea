"""An automation the running daemon has not loaded fails at the door, and `agentd automations
reload` loads it without a restart: through `agentd run`, with a folder the test writes into
while the daemon runs. One started while no daemon ran, for a file gone by the time one does,
is not silent either: the owner is told, with the commands that fix it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.daemon_process import OWNER, Daemon, daemon_env, poll
from tests.fakes import FakeAnthropic, FakeTelegram

GREET = """
from pydantic import BaseModel
from agentd.automations import AutoStep, workflow

class In(BaseModel):
    name: str

class Out(BaseModel):
    text: str

@workflow("greet", input=In, output=Out, version={version})
async def greet(step: AutoStep, inp: In) -> Out:
    return Out(text=f"{greeting}, {{inp.name}}")
"""


def write_greet(folder: Path, version: int, greeting: str) -> None:
    (folder / "greet.py").write_text(GREET.format(version=version, greeting=greeting))


def start_greet(daemon: Daemon) -> tuple[int, str, str]:
    done = daemon.cli("workflows", "start", "greet", "--input", '{"name": "Ana"}')
    return done.returncode, done.stdout.strip(), " ".join(done.stderr.split())


def test_start_refuses_what_the_daemon_has_not_loaded_and_reload_loads_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "automations"
    folder.mkdir()
    (tmp_path / "agentd.toml").write_text(f'[automations]\nfolder = "{folder}"\n')
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        env = daemon_env(
            tmp_path, tg.base_url, llm.base_url, AGENTD_CONFIG=str(tmp_path / "agentd.toml")
        )
        daemon = Daemon(tmp_path, env).start()
        try:
            write_greet(folder, 1, "Hello")  # after the daemon loaded its (empty) folder
            code, out, error = start_greet(daemon)
            assert code == 1 and out == "", (out, error)
            assert "has not loaded the automation 'greet'" in error
            assert "agentd automations reload" in error
            counted = "SELECT COUNT(*) FROM workflow_instances WHERE workflow = 'greet'"
            assert daemon.query(counted)[0][0] == 0
            told = poll(
                lambda: [
                    m["plain_text"]
                    for m in tg.sent
                    if m["chat_id"] == OWNER and "was refused" in m["plain_text"]
                ],
                60,
                "the owner told of the refused start",
            )
            assert "greet" in told[0] and "agentd automations reload" in told[0]

            listed = daemon.cli_json("automations", "ls")["automations"]
            assert [(a["name"], a["daemon"]) for a in listed] == [("greet", "not loaded")]
            reloaded = daemon.cli_json("automations", "reload")
            assert reloaded == {"automations": {"greet": ["1"]}, "problems": []}
            listed = daemon.cli_json("automations", "ls")["automations"]
            assert [(a["name"], a["daemon"]) for a in listed] == [("greet", "loaded")]
            iid = daemon.cli_json("workflows", "start", "greet", "--input", '{"name": "Ana"}')[
                "instance_id"
            ]
            waited = json.loads(daemon.cli("workflows", "wait", iid, "--timeout", "60").stdout)
            assert waited["output"] == {"text": "Hello, Ana"}

            write_greet(folder, 2, "Hi")  # changed on disk, not yet in the daemon
            code, _, error = start_greet(daemon)
            assert code == 1 and "changed since the running daemon" in error, error
            assert "version 1" in error and "version 2" in error
            done = daemon.cli("automations", "reload")
            assert done.returncode == 0 and "greet (2)" in done.stdout, done.stdout
            iid = daemon.cli_json("workflows", "start", "greet", "--input", '{"name": "Bo"}')[
                "instance_id"
            ]
            waited = json.loads(daemon.cli("workflows", "wait", iid, "--timeout", "60").stdout)
            assert waited["output"] == {"text": "Hi, Bo"}

            (folder / "broken.py").write_text("raise RuntimeError('half-written')\n")
            done = daemon.cli("automations", "reload")
            assert done.returncode == 1 and "half-written" in done.stderr, done.stderr
            (folder / "broken.py").unlink()

            # `systemctl reload agentd` sends SIGHUP: the same reload.
            hello = GREET.format(version=1, greeting="Hey").replace('"greet"', '"hello"')
            (folder / "hello.py").write_text(hello)
            assert daemon.proc is not None
            daemon.proc.send_signal(signal.SIGHUP)
            poll(
                lambda: daemon.query("SELECT 1 FROM automation_loaded WHERE automation = 'hello'"),
                60,
                "hello loaded after SIGHUP",
            )
            iid = daemon.cli_json("workflows", "start", "hello", "--input", '{"name": "Di"}')[
                "instance_id"
            ]
            waited = json.loads(daemon.cli("workflows", "wait", iid, "--timeout", "60").stdout)
            assert waited["output"] == {"text": "Hey, Di"}
            (folder / "hello.py").unlink()
        finally:
            daemon.stop()

        # Started while no daemon runs (the CLI says it will run at the next start) …
        done = daemon.cli("workflows", "start", "greet", "--input", '{"name": "Cy"}')
        assert done.returncode == 0 and "No daemon runs" in done.stderr, done.stderr
        iid = done.stdout.strip()
        # … but the file is gone when it does: the owner is told, not left guessing.
        (folder / "greet.py").unlink()
        daemon.start()
        try:
            told = poll(
                lambda: [
                    m["plain_text"]
                    for m in tg.sent
                    if m["chat_id"] == OWNER and iid in m["plain_text"]
                ],
                60,
                "the owner told about the automation it could not run",
            )
            assert "has not loaded it" in told[0] and "agentd automations reload" in told[0]
            assert f"agentd workflows retry {iid}" in told[0]
            assert "not loaded" in daemon.log()
        finally:
            daemon.stop()


def test_reload_without_a_daemon_says_there_is_nothing_to_reload(tmp_path: Path) -> None:
    (tmp_path / "agentd.toml").write_text(f'[automations]\nfolder = "{tmp_path}"\n')
    env = daemon_env(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9")
    env["AGENTD_CONFIG"] = str(tmp_path / "agentd.toml")
    daemon = Daemon(tmp_path, env)
    from agentd.db import open_sync
    from agentd.db.migrations import apply_migrations

    conn = open_sync(tmp_path / "agentd.db")
    apply_migrations(conn)
    conn.close()
    done = daemon.cli("automations", "reload")
    assert done.returncode == 0 and "No daemon runs" in done.stderr, done.stderr


def test_reload_says_so_when_the_config_names_a_folder_the_daemon_does_not_read(
    tmp_path: Path,
) -> None:
    """The daemon reads [automations] folder when it starts: a folder named afterwards is not
    reloaded, and `reload` says so (exit 1) rather than "Reloaded: no automations" while
    `automations ls` and `workflows start` send the owner back to `reload`."""
    config = tmp_path / "agentd.toml"
    config.write_text("")
    folder = tmp_path / "automations"
    folder.mkdir()
    write_greet(folder, 1, "Hello")
    with FakeTelegram.running() as tg, FakeAnthropic.running() as llm:
        tg.add_chat(OWNER)
        env = daemon_env(tmp_path, tg.base_url, llm.base_url, AGENTD_CONFIG=str(config))
        daemon = Daemon(tmp_path, env).start()
        try:
            config.write_text(f'[automations]\nfolder = "{folder}"\n')
            done = daemon.cli("automations", "reload")
            said = " ".join(done.stderr.split())
            assert done.returncode == 1, (done.stdout, said)
            assert "Not loaded: greet" in said and "Restart it" in said, said
            done = daemon.cli("automations", "reload", "--json")
            assert json.loads(done.stdout)["not_loaded"] == ["greet"], done.stdout
        finally:
            daemon.stop()
