"""What enabled skills cost: prompt tokens added by 0, 10 and 50 skills, and the prompt-cache read
share of a 20-turn chat with 10 skills enabled beside none, through `agentd run`.

Each run starts `agentd run` (a subprocess, tests/daemon_process.py) against the local Telegram
and Anthropic fakes with N skills in the skill folder, each enabled the way `agentd skills
enable` does it (agentd.skills.store.confirm on the folder as read). The skills are written
here in the published format with descriptions of realistic length (one or two sentences, 150
to 260 characters, like the public skills' own); their bodies never reach the prompt.

Tokens are the fake's count (about four characters a token, tests/fakes/anthropic.py) of the
first model call's whole input (uncached + cache read + cache write), as recorded in
`llm_usage`; "added" is the difference to the run with no skills. The 20-turn chat sends LoCoMo
lines (/work/shared/data/locomo-dev.json) back to back (no pauses, so every cache entry is
warm), with the fake's minimum cacheable prefix set per run (1,024: Sonnet 4.5; 4,096: Haiku
4.5) and the daemon configured with that model so its history window is shaped for it. The
share is cache-read tokens over all input tokens of the turn calls, summed over the chat.

Usage: .venv/bin/python benchmarks/skills_cost.py [--turns 20] [--counts 0,10,50]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.db import open_sync
from agentd.db.migrations import apply_migrations
from agentd.skills.folder import read_skill
from agentd.skills.store import confirm
from tests.daemon_process import OWNER, Daemon, daemon_env
from tests.fakes import FakeAnthropic, FakeTelegram

LOCOMO = Path("/work/shared/data/locomo-dev.json")
TOPICS = [
    ("pdf-forms", "Fill in PDF forms and extract their fields", "a PDF form or fillable document"),
    ("csv-report", "Summarise a CSV file into a short report with totals", "spreadsheets or CSV"),
    ("git-history", "Explain a repository's recent git history and who changed what", "commits"),
    ("recipe-scale", "Scale a recipe up or down and convert its units", "cooking quantities"),
    ("travel-plan", "Draft a day-by-day travel itinerary with transport times", "trip planning"),
    ("invoice-check", "Check an invoice's arithmetic, VAT and due date", "invoices or bills"),
    ("meeting-notes", "Turn rough meeting notes into decisions and action items", "meetings"),
    ("budget-plan", "Build a monthly budget from income and spending lines", "money planning"),
    ("email-draft", "Draft a polite email in the owner's usual tone and sign-off", "emails"),
    ("log-triage", "Find the first error and its cause in a service log", "server logs"),
]


def description(n: int) -> str:
    name, what, when = TOPICS[n % len(TOPICS)]
    return (
        f"{what}, following the owner's house rules and templates. Use when the user "
        f"mentions {when}, asks for {name.replace('-', ' ')}, or sends a file that needs "
        f"it (variant {n})."
    )


def write_skills(folder: Path, count: int) -> None:
    for n in range(count):
        name = f"{TOPICS[n % len(TOPICS)][0]}-{n}"
        skill = folder / name
        skill.mkdir(parents=True)
        body = "\n".join(f"{k}. Step {k} of the procedure for {name}." for k in range(1, 40))
        (skill / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {description(n)}\nlicense: MIT\n---\n\n{body}\n"
        )


def enable_all(db_path: Path, folder: Path) -> None:
    conn = open_sync(db_path)
    try:
        apply_migrations(conn)
        for skill in sorted(folder.iterdir()) if folder.exists() else []:
            with conn:
                confirm(conn, read_skill(skill), str(skill), time.time(), by="benchmark")
    finally:
        conn.close()


def chat_lines(count: int) -> list[str]:
    lines = []
    for sample in json.loads(LOCOMO.read_text()):
        conv = sample["conversation"]
        for key in sorted(
            (k for k in conv if k.startswith("session_") and k[8:].isdigit()),
            key=lambda k: int(k[8:]),
        ):
            lines += [t["text"] for t in conv[key] if len(t.get("text", "").split()) >= 4]
    return lines[:count]


def run(skills: int, turns: list[str], minimum: int, model: str, tmp: Path) -> list[tuple]:
    """(input, cache read, cache write) of every turn call of one chat."""
    folder = tmp / "skills"
    write_skills(folder, skills)
    (tmp / "agentd.toml").write_text('[skills]\npaths = ["skills"]\n')
    with FakeTelegram.running() as tg, FakeAnthropic.running(cache_min_tokens=minimum) as llm:
        llm.set_responder(lambda body: "Noted; here is a short, helpful answer to that.")
        env = daemon_env(
            tmp,
            tg.base_url,
            llm.base_url,
            AGENTD_CONFIG=str(tmp / "agentd.toml"),
            AGENTD_LLM__MODEL=model,
            AGENTD_LIMITS__MESSAGES_PER_MINUTE="0",
        )
        enable_all(Path(env["AGENTD_STORAGE__PATH"]), folder)
        daemon = Daemon(tmp, env).start(timeout=120)
        try:
            for n, text in enumerate(turns, start=1):
                tg.add_message(OWNER, OWNER, text)
                tg.wait_for_sent(n, timeout=60, chat_id=OWNER)
                while (
                    daemon.query("SELECT COUNT(*) FROM messages WHERE role = 'assistant'")[0][0] < n
                ):
                    time.sleep(0.02)
            rows = daemon.query(
                "SELECT input_tokens, cache_read_tokens, cache_write_tokens "
                "FROM llm_usage WHERE purpose = 'turn' ORDER BY id"
            )
            listed = [b for b in llm.requests if "<skills>" in json.dumps(b["body"]["system"])]
            assert (len(listed) == len(llm.requests)) == bool(skills), "listing missing"
        finally:
            daemon.stop()
    return [tuple(r) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--counts", default="0,10,50")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    turns = chat_lines(args.turns)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print("\nPrompt tokens of a turn's first model call (fake's count, ~4 chars/token):")
    first: dict[int, int] = {}
    for count in counts:
        with tempfile.TemporaryDirectory(prefix="agentd-skills-bench-") as tmp:
            rows = run(count, turns[:1], 1024, "claude-sonnet-4-5", Path(tmp))
        first[count] = sum(rows[0])
        added = first[count] - first[counts[0]]
        per = f", {added / count:.0f} per skill" if count else ""
        print(f"  {count:>3} skills: {first[count]:>6} tokens  (+{added} vs {counts[0]}{per})")
    if len(counts) >= 3 and counts[1] and counts[2] > counts[1]:
        marginal = (first[counts[2]] - first[counts[1]]) / (counts[2] - counts[1])
        fixed = first[counts[1]] - first[counts[0]] - marginal * counts[1]
        print(
            f"  = {fixed:.0f} tokens once (the three skill tools and the rule) + "
            f"{marginal:.0f} per skill (its name and description)"
        )
    print(f"\nCache-read share of input over a {args.turns}-turn chat (back to back, warm):")
    for minimum, model in ((1024, "claude-sonnet-4-5"), (4096, "claude-haiku-4-5")):
        shares = {}
        for count in (0, 10):
            with tempfile.TemporaryDirectory(prefix="agentd-skills-bench-") as tmp:
                rows = run(count, turns, minimum, model, Path(tmp))
            total = sum(a + b + c for a, b, c in rows)
            # What the input costs, in uncached-token units at list prices: a read is 0.1×, a
            # write 2× (agentd's default 1-hour cache).
            billed = sum(a + 0.1 * b + 2 * c for a, b, c in rows)
            shares[count] = (sum(b for _, b, _ in rows) / total, total, len(rows), billed)
        for count, (share, total, calls, billed) in shares.items():
            print(
                f"  min {minimum:>4} ({model}), {count:>2} skills: {share:6.1%} read from cache "
                f"of {total:,} input tokens in {calls} calls; billed as {billed:,.0f} "
                f"uncached tokens" + (f" (×{billed / shares[0][3]:.2f} vs none)" if count else "")
            )


if __name__ == "__main__":
    main()
