"""The command router: what is a command, the menu, callbacks; /new's history cut."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from agentd.access import pairing
from agentd.agent.window import WindowRule, load_window
from agentd.chat.inputs import CallbackPress, TurnInput
from agentd.chat.outbox import Button
from agentd.commands.chat import _tokens_line, choose_to_stop, status_command
from agentd.commands.router import CommandInput, CommandReply, CommandRouter, command_key
from agentd.config import AccessConfig, Config
from agentd.db import Database
from agentd.durable import Engine, FakeClock, store
from agentd.ledger import usage
from agentd.ledger.pricing import Tokens
from agentd.ledger.usage import UsageTotals
from agentd.memory import history
from tests.outboxes import LimitedOutbox


def turn(text: str, **kw: Any) -> TurnInput:
    fields: dict[str, Any] = {
        "update_id": 1,
        "chat_id": 7,
        "user_id": 7,
        "message_id": 3,
        "date": 0.0,
        "kind": "text",
        "text": text,
        **kw,
    }
    fields.setdefault("chat_kind", "group" if fields["chat_id"] < 0 else "private")
    return TurnInput(**fields)


async def hello(inp: CommandInput) -> CommandReply:
    """Say hello."""
    return CommandReply(text=f"hello {inp.args}")


@pytest.fixture
def router() -> CommandRouter:
    r = CommandRouter(bot_usernames=frozenset({"agentd_bot"}))
    r.command("hello", hello)
    return r


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("/hello", "hello", ""),
        ("/Hello  world  ", "hello", "world"),
        ("/hello@agentd_bot there", "hello", "there"),
        ("/nosuch x", "nosuch", "x"),  # unknown commands still route: they get a hint
        ("/start\nline two", "start", "line two"),
    ],
)
def test_commands_are_recognised(router: CommandRouter, text: str, name: str, args: str) -> None:
    parsed = router.parse(turn(text))
    assert parsed is not None and (parsed.name, parsed.args) == (name, args)
    workflow, inp, key = router.route(turn(text)) or ("", None, "")
    assert (workflow, key) == ("command", command_key(7)) and inp == parsed


def test_a_start_code_is_kept_only_as_its_digest(router: CommandRouter) -> None:
    router.command("start", hello, keep_args=pairing.start_digest)
    parsed = router.parse(turn("/start abcd-efgh"))
    assert parsed is not None and parsed.args == pairing._hash("ABCDEFGH")
    assert pairing.start_digest(parsed.args) == parsed.args  # a journaled digest stays one
    for text in ("/start", "/start hello there", "/start abc"):
        assert (router.parse(turn(text)) or parsed).args == ""


@pytest.mark.parametrize(
    "message",
    [
        turn("/etc/hosts is a file"),
        turn("hello /hello"),
        turn("/hello@other_bot"),
        turn("/hello", edited=True),  # an edit is not a new command
        turn("/hello", kind="photo"),  # a caption is not a command
    ],
)
def test_other_messages_go_to_the_model(router: CommandRouter, message: TurnInput) -> None:
    assert router.route(message) is None


async def test_unknown_command_gets_a_hint(router: CommandRouter) -> None:
    reply = await router.reply_to(
        CommandInput(name="nosuch", chat_id=1, chat_kind="private", user_id=1, message_id=1)
    )
    assert "/help" in reply.text
    known = await router.reply_to(
        CommandInput(
            name="hello", args="you", chat_id=1, chat_kind="private", user_id=1, message_id=1
        )
    )
    assert known.text == "hello you"


def test_menu_uses_the_description_or_the_docstring(router: CommandRouter) -> None:
    router.command("bye", hello, "Leave")
    assert router.menu() == [("hello", "Say hello."), ("bye", "Leave")]
    with pytest.raises(ValueError, match="twice"):
        router.command("bye", hello)
    with pytest.raises(ValueError, match="a-z"):
        router.command("Bad-Name", hello)


def test_callbacks_route_by_prefix_and_unknown_ones_are_audited(router: CommandRouter) -> None:
    router.callback("xx", lambda conn, press: f"got {press.data}")
    press = CallbackPress(
        update_id=1, callback_id="c", user_id=7, chat_id=7, chat_kind="private", data="xx:1"
    )
    assert router.on_callback(None, press) == "got xx:1"

    class Conn:
        def __init__(self) -> None:
            self.rows: list[tuple[Any, ...]] = []

        def execute(self, sql: str, params: tuple[Any, ...]) -> None:
            self.rows.append(params)

    conn = Conn()
    forged = press.model_copy(update={"data": "zz:forged"})
    assert "not recognised" in router.on_callback(conn, forged)
    assert conn.rows and conn.rows[0][1] == "callback_unknown"


async def test_new_cuts_the_prompt_history_and_keeps_the_rows(db: Database) -> None:
    def save(conn: Any, n: int, text: str, chat: int = 5) -> int:
        return history.save_message(
            conn, chat_id=chat, user_id=chat, role="user", content=text, source_key=f"k{n}"
        )

    for n in range(3):
        await db.write(save, n, f"old {n}")
    await db.write(save, 8, "other chat", 6)
    await db.write(history.start_fresh, 5, 100.0)
    new_id = await db.write(save, 9, "new")
    rule = WindowRule(limit=20, step=10, cold_after=3660, min_tokens=0)

    async def prompt_history(chat: int, before: int) -> list[str]:
        def read(conn: Any) -> list[str]:
            floor = history.context_floor(conn, chat)
            start = load_window(conn, chat, before, floor, rule, 200.0)
            return [content for _, content in history.turns_between(conn, chat, start, before)]

        return await db.write(read)

    assert await prompt_history(5, new_id) == []
    assert await prompt_history(5, new_id + 1) == ["new"]
    assert await prompt_history(6, new_id) == ["other chat"]
    assert len(await db.read(lambda c: history.history(c, chat_id=5))) == 4


async def test_the_history_window_restarts_after_new(db: Database) -> None:
    rule = WindowRule(limit=2, step=10, cold_after=3660, min_tokens=0)

    def save(conn: Any, n: int) -> int:
        return history.save_message(
            conn,
            chat_id=5,
            user_id=5,
            role="user",
            content=f"m{n}",
            source_key=f"w{n}",
            created_at=1000.0 + n,
        )

    ids = [await db.write(save, n) for n in range(4)]
    start = await db.write(load_window, 5, ids[3], 0, rule, 1010.0)
    assert start == ids[0]  # the window grows while it is under limit + step
    await db.write(history.start_fresh, 5, 1010.0)
    new_id = await db.write(save, 9)
    floor = await db.read(history.context_floor, 5)
    assert await db.write(load_window, 5, new_id, floor, rule, 1011.0) == new_id  # empty


def test_status_prices_each_model_and_one_hour_writes_apart() -> None:
    rows = [
        UsageTotals(
            day="2026-11-23",
            chat_id=5,
            model="claude-haiku-4-5",
            calls=2,
            cache_write_tokens=1_000_000,
            cache_write_1h_tokens=1_000_000,
        ),
        UsageTotals(
            day="2026-11-23", chat_id=5, model="claude-sonnet-4-5", calls=1, output_tokens=100_000
        ),
    ]
    line = _tokens_line(rows, {})
    assert line.startswith("3 model calls, 1,000,000 input tokens (0 from cache), 100,000 output")
    assert line.endswith("≈ $3.5000")  # 1M 1-hour writes at $2 + 0.1M Sonnet output at $15


async def test_status_in_a_group_shows_only_that_groups_figures(db: Database) -> None:
    owner, group = 42, -1001

    def spend(conn: Any) -> None:
        for chat, tokens in ((owner, 7_000), (group, 300)):
            used = Tokens(output_tokens=tokens)
            usage.record(conn, used, model="claude-haiku-4-5", purpose="turn", chat_id=chat)

    await db.write(spend)
    deps: Any = SimpleNamespace(
        config=Config(access=AccessConfig(allowed_user_ids=[owner, 43])),
        db=db,
        clock=FakeClock(time.time()),
        llm=None,
        started_at=time.time(),
    )

    async def status(chat_id: int) -> str:
        kind = "group" if chat_id < 0 else "private"
        asked = CommandInput(name="status", chat_id=chat_id, chat_kind=kind, user_id=owner)
        return (await status_command(deps, asked)).text

    mine, theirs = await status(owner), await status(group)
    assert "7,300 output tokens" in mine  # the owner's own chat: everyone's figures
    assert "Today (UTC), this chat:** 1 model calls" in theirs and "300 output tokens" in theirs
    assert "7,300" not in theirs and "7,000" not in theirs
    assert "/status in our private chat" in theirs and "Up:" in theirs


def _under_way(*texts: str) -> list[tuple[store.InstanceRecord, str]]:
    return [
        (
            store.InstanceRecord(
                seq=n,
                id=f"turn-{n}",
                workflow="turn",
                key="chat:7",
                status="running",
                input=f'{{"text": "{text}"}}',
                output=None,
                error=None,
                created_at=0.0,
                updated_at=0.0,
                finished_at=None,
                wake_at=None,
                waiting_for=None,
                runs=1,
                cancel_requested=False,
            ),
            "being answered",
        )
        for n, text in enumerate(texts, 1)
    ]


def test_stop_names_what_it_did_not_understand_and_what_works() -> None:
    turns = _under_way("first question", "second question")
    picked = choose_to_stop(turns, "2, 1")
    assert isinstance(picked, list) and [t.id for t in picked] == ["turn-2", "turn-1"]
    for args in ("all extra", "everything", "1 and 2"):
        reply = choose_to_stop(turns, args)
        assert isinstance(reply, CommandReply)
        assert reply.text.startswith(f"I didn't understand “/stop {args}”."), reply.text
        assert "`/stop N`" in reply.text and "`/stop all`" in reply.text
        assert "no number" not in reply.text
    far = choose_to_stop(turns, "3")
    assert isinstance(far, CommandReply) and far.text.startswith("There is no number 3")


def test_a_message_a_command_waits_for_is_claimed_with_the_intake_transaction(
    router: CommandRouter,
) -> None:
    seen: list[Any] = []

    def waiting(conn: Any, message: TurnInput) -> CommandInput | None:
        seen.append(conn)
        if message.text != "the answer":
            return None
        return CommandInput(
            name="hello", args=message.text, chat_id=7, chat_kind="private", user_id=7
        )

    router.awaits(waiting)
    conn = object()
    workflow, inp, key = router.route(turn("the answer"), conn) or ("", None, "")
    assert (workflow, key) == ("command", command_key(7))
    assert isinstance(inp, CommandInput) and inp.args == "the answer"
    assert router.route(turn("anything else"), conn) is None  # still a turn for the model
    assert router.route(turn("the answer", edited=True), conn) is None  # edits are not asked
    assert router.route(turn("the answer")) is None and seen == [conn, conn]


async def test_a_reply_longer_than_one_message_arrives_whole(db: Database) -> None:
    lines = [f"• reminder number {n}, with some words to make it long" for n in range(20)]

    async def listing(inp: CommandInput) -> CommandReply:
        return CommandReply(text="\n\n".join(lines), buttons=[[Button(text="Cancel", data="x")]])

    router, outbox = CommandRouter(), LimitedOutbox()
    router.command("list", listing, "A long list")
    engine = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    engine.register(router.workflow(outbox, db))  # type: ignore[arg-type]
    await engine.run()
    try:
        inp = CommandInput(name="list", chat_id=7, chat_kind="private", user_id=7, message_id=3)
        await engine.start("command", inp, instance_id="cmd-1")
        done = await engine.wait_for("cmd-1")
    finally:
        await engine.shutdown(2)
    assert done.status == "complete", done.error
    assert len(outbox.sent) > 1
    assert all(line in "\n".join(m["text"] for m in outbox.sent) for line in lines)
    assert [m["reply_to"] for m in outbox.sent] == [3] + [None] * (len(outbox.sent) - 1)
    assert [bool(m["buttons"]) for m in outbox.sent] == [False] * (len(outbox.sent) - 1) + [True]
