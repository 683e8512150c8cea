"""A server that never takes a connection: its accept queue is full, so the kernel drops a new
client's handshake and the client's connect times out (a host down behind a firewall that
drops, a server too busy to accept). Nothing of a request ever reaches it."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager


@contextmanager
def full_listener() -> Iterator[str]:
    """The listener's base URL, while its accept queue is held full."""
    with ExitStack() as held:
        server = held.enter_context(socket.socket())
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        port = server.getsockname()[1]
        for _ in range(4):  # more handshakes than a queue of 0 holds: the rest wait
            filler = held.enter_context(socket.socket())
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
        yield f"http://127.0.0.1:{port}"
