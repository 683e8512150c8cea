"""Run a fake as a separate process and drive it through its /_fake JSON endpoints."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Self

REPO_ROOT = Path(__file__).resolve().parents[2]


class FakeControl:
    """A small sync client for a fake's /_fake/... endpoints: ``ctl.post("message", {...})``."""

    def __init__(self, base_url: str = "") -> None:
        self.base_url = base_url

    def request(self, method: str, name: str, body: Any = None, timeout: float = 30.0) -> Any:
        """Call /_fake/{name}; returns the decoded JSON (RuntimeError on an HTTP error)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.base_url}/_fake/{name}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"/_fake/{name}: {e.code} {e.read().decode()}") from None

    def get(self, name: str, **query: Any) -> Any:
        qs = urllib.parse.urlencode(query)
        return self.request("GET", f"{name}?{qs}" if qs else name)

    def post(self, name: str, body: dict[str, Any] | None = None) -> Any:
        return self.request("POST", name, body or {})


class FakeProcess(FakeControl):
    """``with FakeProcess("telegram") as tg: tg.base_url; tg.post("message", {...})``."""

    def __init__(self, kind: str, *args: str, port: int = 0, python: str = sys.executable) -> None:
        """kind: "telegram" or "anthropic"; args: extra CLI options (e.g. "--token", "1:x")."""
        super().__init__()
        self.argv = [python, "-m", f"tests.fakes.{kind}", "--port", str(port), *args]
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 15.0) -> Self:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            self.argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        # The fake prints its base URL once it listens.
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http"):
            self.stop()
            raise RuntimeError(f"{self.argv} did not start within {timeout}s (got {line!r})")
        self.base_url = line
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
