"""The browser's fence, tried for real: the proxy in the daemon refuses loopback, private and
metadata addresses unless `[browser] allowed_hosts` names them (with their port), and the
namespace the browser runs in reaches nothing but that proxy: not the host's loopback, not
its LAN address, not metadata, even past the proxy."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.browser import jail
from agentd.browser.proxy import Allowlist, BrowserProxy

NO_SANDBOX = next(
    (f"{tool} is not installed" for tool in ("bwrap", "pasta") if shutil.which(tool) is None), None
)


@pytest.fixture
def listener() -> Iterator[tuple[int, threading.Event]]:
    """A loopback service that notes whether anything connected to it."""
    server = socket.create_server(("127.0.0.1", 0))
    reached = threading.Event()

    def serve() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        reached.set()
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], reached
    server.close()


async def _through(proxy: BrowserProxy, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    return answer


def test_the_proxy_reaches_only_the_allowed_host_and_port(
    listener: tuple[int, threading.Event],
) -> None:
    port, reached = listener

    async def go() -> list[bytes]:
        proxy = BrowserProxy(Allowlist.of([f"127.0.0.1:{port + 1}"]))
        await proxy.start()
        try:
            return [
                await _through(proxy, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()),
                await _through(
                    proxy, f"GET http://localhost:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                ),
                await _through(proxy, b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n"),
                await _through(proxy, b"GET /relative HTTP/1.1\r\nHost: x\r\n\r\n"),
            ]
        finally:
            await proxy.close()

    answers = asyncio.run(go())
    assert all(a.startswith(b"HTTP/1.1 403") for a in answers), answers
    assert b"loopback" in answers[0] and b"metadata" in answers[2]
    assert not reached.is_set()

    async def allowed() -> bytes:
        proxy = BrowserProxy(Allowlist.of([f"127.0.0.1:{port}"]))
        await proxy.start()
        try:
            return await _through(
                proxy, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
        finally:
            await proxy.close()

    answer = asyncio.run(allowed())
    assert answer.startswith(b"HTTP/1.0 200") and b"Connection: close" in answer
    assert reached.is_set()


def _host_address() -> str:
    """This machine's own non-loopback address (its first global IPv4 one)."""
    shown = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout.split()
    return shown[shown.index("inet") + 1].split("/")[0] if "inet" in shown else "10.0.0.2"


PROBE = """
import socket, sys
for host, port in [(a.rsplit(':', 1)[0], int(a.rsplit(':', 1)[1])) for a in sys.argv[1:]]:
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        print(host, port, 'REACHED')
    except OSError as e:
        print(host, port, 'refused', e.errno)
    s.close()
"""


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no browser sandbox here: {NO_SANDBOX}")
def test_the_namespace_reaches_nothing_but_the_proxy(listener: tuple[int, threading.Event]) -> None:
    """The same wrapper the browser starts in, with python in Chromium's place."""
    port, reached = listener
    run = Path(tempfile.mkdtemp(prefix="agentd-fence-"))
    downloads = Path(tempfile.mkdtemp(prefix="agentd-fence-dl-"))
    try:
        proxy_port = _free_port()
        proxy = socket.create_server(("127.0.0.1", proxy_port))
        ids = (65534, 65534) if jail.os.geteuid() == 0 else None
        if ids is not None:
            jail.os.chown(downloads, *ids)
        spec = jail.Jail(
            run_dir=run,
            downloads=downloads,
            chromium="/usr/bin/python3",
            run_as=ids,
            proxy_port=proxy_port,
        )
        wrapper = jail.write_wrapper(spec)
        targets = [
            f"127.0.0.1:{port}",
            f"{_host_address()}:{port}",
            "169.254.169.254:80",
            "10.0.0.1:80",
            f"127.0.0.1:{proxy_port}",
        ]
        done = subprocess.run(
            [str(wrapper), "-c", PROBE, *targets],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        proxy.close()
    finally:
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(downloads, ignore_errors=True)
    lines = done.stdout.splitlines()
    assert len(lines) == 5, done.stdout + done.stderr
    assert all("refused" in line for line in lines[:4]), lines
    assert "REACHED" in lines[4], lines  # the one way out: the proxy's forwarded port
    assert not reached.is_set()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no browser sandbox here: {NO_SANDBOX}")
def test_doctor_tries_the_browsers_sandbox_for_real() -> None:
    ids = (65534, 65534) if jail.os.geteuid() == 0 else None
    assert jail.probe(ids) is None
    assert "bubblewrap" in str(jail.probe(ids, bwrap="no-such-bwrap"))
