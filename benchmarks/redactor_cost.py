"""What the redactor costs per line: 10,000 redactions of a 2 KB log line with 10 secrets
configured, none of them in the line, then two of them, then one sent as HTTP Basic by a user
agentd does not know (an automation's); optionally with values learned at run time (a
signed-in browser profile's cookies) on top.

    python -m benchmarks.redactor_cost [--learned N]

Prints microseconds per line for each case, the best of 15 runs in CPU time (on a shared box
another process's turn on the core would count in wall time)."""

from __future__ import annotations

import argparse
import base64
import secrets
import string
import time

from agentd.runtime.redact import Redactor

LINES = 10_000
RUNS = 15


def _line(rng: secrets.SystemRandom, size: int = 2048) -> str:
    """A log line's worth of words and numbers (JSON-ish, as the formatter writes)."""
    words = ["turn", "step", "sent", "chat_id", "instance", "ok", "error", "tool", "result"]
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < size:
        parts.append(f'"{rng.choice(words)}": {rng.randrange(10**6)}')
    return ("{" + ", ".join(parts))[: size - 1] + "}"


def _secret(rng: secrets.SystemRandom, n: int = 32) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits + "-_") for _ in range(n))


def _best_us(redact: Redactor, line: str) -> float:
    best = float("inf")
    for _ in range(RUNS):
        start = time.process_time()
        for _ in range(LINES):
            redact(line)
        best = min(best, time.process_time() - start)
    return best / LINES * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learned", type=int, default=0, help="values learned on top")
    args = parser.parse_args()
    rng = secrets.SystemRandom()
    configured = [_secret(rng) for _ in range(10)]
    redact = Redactor(configured)
    learn = getattr(redact, "learn", None)
    if args.learned:
        if learn is None:
            raise SystemExit("this redactor cannot learn values")
        learn([_secret(rng, 24) for _ in range(args.learned)])
    line = _line(rng)
    at = len(line) // 3
    with_two = line[:at] + configured[2] + line[at : 2 * at] + configured[7] + line[2 * at :]
    with_two = with_two[: len(line)]
    assert configured[2] in with_two and configured[7] in with_two
    basic = base64.b64encode(f"ci-robot:{configured[4]}".encode()).decode()
    header = f'"authorization": "Basic {basic}", '
    with_basic = (line[:at] + header + line[at:])[: len(line)]
    print(f"secrets configured: 10, learned: {args.learned}, line: {len(line)} chars")
    print(f"none present: {_best_us(redact, line):.2f} us/line")
    print(f"two present:  {_best_us(redact, with_two):.2f} us/line")
    print(f"one in Basic: {_best_us(redact, with_basic):.2f} us/line")


if __name__ == "__main__":
    main()
