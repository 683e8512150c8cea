"""How many approval cards a realistic week costs, and what raised each one.

A scripted week of one owner's private chat (plain chat, research with fetches, mail triage, a
morning briefing, files, reminders, memories, a forwarded invitation) is replayed through the
real risk policy: `call_risk` over the real tool declarations, with the taint each call would
see. The taint follows the rules of the code it runs under:

- on this branch, what the model sees: the turn's own outside input, the outside rows still
  in the history window (20 messages: the window after a pause longer than the prompt cache),
  recalled memories derived from outside content, and what its tools read; a fetch runs
  unasked only for a URL the owner wrote or a host they allowed (the scripted owner presses
  "Always allow" for the one reference site they trust);
- on main (`--base DIR`, a checkout: `git archive main | tar -x -C /tmp/base`), what main
  did: taint per turn, any recalled memory taints, and a fetch of a URL a result showed in
  the same turn runs unasked.

    .venv/bin/python benchmarks/approval_week.py                    # this checkout
    .venv/bin/python benchmarks/approval_week.py --base /tmp/base   # and main's, side by side

Prints cards per day and the causes; `--json` for the raw counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

WINDOW = 20  # messages in view after a cold pause (agentd/agent/window.py cuts to the limit)
TRUSTED_HOST = "en.wikipedia.org"  # the owner allows it at its first card (this branch only)


@dataclasses.dataclass
class Call:
    tool: str
    args: dict[str, Any]
    shown: bool = False  # a fetch of a URL that a result in this turn showed
    own_url: bool = False  # a fetch of a URL the owner wrote in this message
    outside: bool | None = None  # search_memory: whether what it found came from outside


@dataclasses.dataclass
class Turn:
    what: str
    calls: list[Call] = dataclasses.field(default_factory=list)
    outside_input: str = ""  # a forwarded message, a document, a webhook body
    recall: str = ""  # "", "own" (the owner's memories), "outside" (a memory from outside)


def _research(topic: str, host: str = "www.bbc.co.uk") -> Turn:
    return Turn(
        f"research: {topic}",
        [
            Call("web_search", {"query": topic}),
            Call("fetch_url", {"url": f"https://{TRUSTED_HOST}/wiki/{topic}"}, shown=True),
            Call("fetch_url", {"url": f"https://{host}/news/{topic}"}, shown=True),
        ],
        recall="own",
    )


def _triage() -> Turn:
    return Turn(
        "mail triage",
        [
            Call("mail_search", {"folder": "INBOX", "unread": True}),
            Call("mail_read", {"folder": "INBOX", "uid": 41}),
            Call("mail_read", {"folder": "INBOX", "uid": 42}),
            Call("mail_move", {"folder": "INBOX", "uids": [38, 39, 40], "to_folder": "Archive"}),
            Call("mail_flag", {"folder": "INBOX", "uids": [41], "flag": "flagged"}),
        ],
    )


def _briefing() -> Turn:
    return Turn(
        "morning briefing (scheduled by the owner)",
        [
            Call("calendar_list", {"days": 1}),
            Call("mail_search", {"folder": "INBOX", "unread": True}),
            Call("web_search", {"query": "weather Lisbon today"}),
        ],
    )


def _chat(text: str, recall: str = "own") -> Turn:
    return Turn(f"chat: {text}", recall=recall)


def _remind(text: str) -> Turn:
    return Turn(
        f"reminder: {text}", [Call("schedule", {"message": text, "after": "3h"})], recall="own"
    )


def _files() -> Turn:
    return Turn(
        "files: tidy the notes",
        [
            Call("list_files", {"path": "."}),
            Call("read_file", {"path": "notes/today.md"}),
            Call("write_file", {"path": "notes/summary.md", "content": "summary"}),
        ],
    )


def _user_link() -> Turn:
    url = "https://example.org/recipe"
    return Turn(
        "the owner's link, and a page it links to",
        [
            Call("fetch_url", {"url": url}, own_url=True),
            Call("fetch_url", {"url": "https://example.org/recipe/step-2"}, shown=True),
        ],
        recall="own",
    )


def _forwarded_invite() -> Turn:
    return Turn(
        "a forwarded invitation: add it to the calendar",
        [Call("calendar_create", {"summary": "Dinner at Ana's", "start": "2026-12-04T19:00"})],
        outside_input="a forwarded message (Ana)",
    )


def _remember(text: str) -> Turn:
    return Turn(f"remember: {text}", [Call("remember", {"content": text, "kind": "fact"})])


def week() -> list[list[Turn]]:
    """Seven days, oldest first."""
    return [
        [_briefing(), _chat("hello"), _research("Solar_panel"), _remind("call the plumber")],
        [_briefing(), _triage(), _chat("thanks"), _files(), _remember("dentist is Dr. Sousa")],
        [_briefing(), _user_link(), _chat("what should I cook?"), _remind("buy lemons")],
        [_briefing(), _forwarded_invite(), _chat("ok"), _triage(), _remind("reply to Ana")],
        [_briefing(), _research("Heat_pump", "www.theguardian.com"), _files(), _chat("night")],
        [_chat("morning", recall="outside"), _research("Sourdough"), _remember("likes rye")],
        [_briefing(), _triage(), _files(), _chat("plans for next week?")],
    ]


# -- the tools, as declared ------------------------------------------------------------------


def declarations(tmp: Path) -> dict[str, Any]:
    """Every tool the week uses, built as the daemon builds it (no connection is made)."""
    from agentd.calendar.tools import build_calendar_tools
    from agentd.config import Config
    from agentd.hands.files import workspace_tools
    from agentd.mail.tools import build_mail_tools
    from agentd.memory.tools import memory_tools
    from agentd.schedule.tools import schedule_tools
    from agentd.tools.builtin import builtin_tools
    from agentd.web.tools import web_tools

    account = {"name": "home", "address": "me@example.org", "password_env": "X"}
    config = Config.model_validate(
        {
            "mail": [{**account, "imap_host": "imap.example.org", "smtp_host": "smtp.example"}],
            "calendar": [{"name": "home", "url": "https://dav.example/", "password_env": "X"}],
            "tools": {"workspace": {"path": str(tmp / "ws")}},
        }
    )
    tools = [
        *builtin_tools(config.tools),
        *web_tools(None, None, config.web, None),  # type: ignore[arg-type]
        *memory_tools(None, None, config.memory),  # type: ignore[arg-type]
        *schedule_tools(None, config, lambda _: None),  # type: ignore[arg-type]
        *workspace_tools(config, None),  # type: ignore[arg-type]
        *build_mail_tools(config, None, {}),  # type: ignore[arg-type]
        *build_calendar_tools(config, {}),
    ]
    return {t.name: t for t in tools}


# -- the replay ------------------------------------------------------------------------------


def _state(tainted: list[str], own_urls: list[str], shown: list[str], hosts: set[str]) -> Any:
    """A CallState for the code this runs under (main's had `known_urls`)."""
    from agentd.tools import CallState

    fields = {f.name for f in dataclasses.fields(CallState)}
    if "known_urls" in fields:  # main: URLs the user wrote or a result showed, normalised
        return CallState(tainted_by=tuple(tainted), known_urls=frozenset(own_urls + shown))
    # The week is the owner's private chat (a state with no chat kind is not taken as one).
    private = {"chat_kind": "private"} if "chat_kind" in fields else {}
    return CallState(
        tainted_by=tuple(tainted),
        user_urls=frozenset(own_urls),
        allowed_hosts=frozenset(hosts),
        **private,
    )


def quiet_week() -> list[list[Turn]]:
    """The same week for an owner with no morning briefing (their mail stays out of view)."""
    return [[t for t in day if not t.what.startswith("morning briefing")] for day in week()]


def replay(
    tools: dict[str, Any], main_rules: bool, always: str = "", days_of: Any = week
) -> list[list[tuple[str, str, str]]]:
    """Per day, each card: (turn, tool, why). `always`: outside content in every prompt (the
    rule agentd did not choose for a skill's or MCP server's words: taint every turn)."""
    from agentd.tools import call_risk

    window: list[str] = []  # the origin of each message in view, oldest first
    hosts: set[str] = set()
    days = []
    for turns in days_of():
        cards = []
        for turn in turns:
            tainted = [turn.outside_input] if turn.outside_input else []
            tainted += [always] if always else []
            if main_rules:
                if turn.recall:  # main: any recalled memory taints
                    tainted.append("memories recalled")
            else:
                if "outside" in window[-WINDOW:]:
                    tainted.append("an earlier message in this chat")
                if turn.recall == "outside":
                    tainted.append("a recalled memory from outside")
            own_turn = bool(turn.outside_input) or turn.recall == "outside"
            own_urls: list[str] = []
            shown: list[str] = []
            for call in turn.calls:
                tool = tools[call.tool]
                url = call.args.get("url", "")
                if call.own_url:
                    own_urls.append(url)
                args = tool.parse_args(call.args)
                verdict = call_risk(tool, args, _state(tainted, own_urls, shown, hosts))
                if verdict.risk == "high":
                    if not main_rules and TRUSTED_HOST in url:
                        hosts.add(TRUSTED_HOST)  # "Always allow en.wikipedia.org"
                    why = f"after {tainted[0]}" if tainted else verdict.reason[:40]
                    cards.append((turn.what, call.tool, why))
                reads = tool.taints if call.outside is None else call.outside
                if reads:
                    tainted.append(call.tool)
                    own_turn = True
                    if main_rules:  # main: the URLs a result shows become known
                        shown += [c.args["url"] for c in turn.calls if c.shown]
            window += ["outside" if turn.outside_input else "user"]
            window += ["outside" if own_turn and not main_rules else "model"]
        days.append(cards)
    return days


def measure() -> dict[str, Any]:
    from agentd.tools import CallState

    main_rules = "known_urls" in {f.name for f in dataclasses.fields(CallState)}
    with tempfile.TemporaryDirectory() as tmp:
        tools = declarations(Path(tmp))
    days = replay(tools, main_rules)
    # One enabled skill or MCP server, its words in every prompt: confirmed and pinned by the
    # owner (this branch: the days above), or else every turn tainted by them (the other choice).
    listed = "a skill's description in the prompt"
    every_turn = replay(tools, main_rules, always=listed)
    quiet = replay(tools, main_rules, days_of=quiet_week)
    quiet_tainted = replay(tools, main_rules, always=listed, days_of=quiet_week)
    return {
        "rules": "main" if main_rules else "this branch",
        "cards_if_listed_text_tainted": [len(d) for d in every_turn],
        "quiet_week_turns": sum(len(d) for d in quiet_week()),
        "quiet_week_cards": [len(d) for d in quiet],
        "quiet_week_cards_if_listed_text_tainted": [len(d) for d in quiet_tainted],
        "turns_per_day": [len(d) for d in week()],
        "cards_per_day": [len(d) for d in days],
        "causes": [Counter(f"{tool} ({why})" for _, tool, why in d) for d in days],
        "cards": days,
    }


def _print(result: dict[str, Any]) -> None:
    cards = result["cards_per_day"]
    turns = sum(result["turns_per_day"])
    print(f"{result['rules']}: {sum(cards)} cards in {turns} turns over 7 days")
    for n, (count, causes) in enumerate(zip(cards, result["causes"], strict=True), start=1):
        said = ", ".join(f"{k} ×{v}" for k, v in sorted(causes.items())) or "-"
        print(f"  day {n}: {count:2d}  {said}")
    tainted = result.get("cards_if_listed_text_tainted")
    if tainted:
        print(
            f"  had a skill's or MCP server's words in every prompt tainted every turn: "
            f"{sum(tainted)} cards ({', '.join(map(str, tainted))} a day)"
        )
        quiet, quiet_tainted = (
            result["quiet_week_cards"],
            result["quiet_week_cards_if_listed_text_tainted"],
        )
        print(
            f"  the week without the morning briefing ({result['quiet_week_turns']} turns): "
            f"{sum(quiet)} cards, or {sum(quiet_tainted)} with every turn tainted "
            f"({', '.join(map(str, quiet))} vs {', '.join(map(str, quiet_tainted))} a day)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="a checkout of main to compare against")
    parser.add_argument("--json", action="store_true", help="print the raw counts as JSON")
    args = parser.parse_args()
    results = [measure()]
    if args.base is not None:
        env = {**os.environ, "PYTHONPATH": str(args.base.resolve())}
        here = str(Path(__file__).resolve())
        out = subprocess.run(
            [sys.executable, here, "--json"], env=env, capture_output=True, text=True, check=True
        )
        base = json.loads(out.stdout)[0]
        base["rules"] = f"{args.base} (the base)"
        results.insert(0, base)
    if args.json:
        print(json.dumps(results, default=dict))
        return
    for result in results:
        _print(result)


if __name__ == "__main__":
    main()
