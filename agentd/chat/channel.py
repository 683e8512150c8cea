"""The channel door: what a chat network's adapter must give agentd, and what it gets.

A channel is an adapter package (`agentd/telegram/`, …) with one object that follows
`Channel`, listed once in `agentd/channels/`. The daemon, `agentd doctor` and the redactor
loop over that list; none of them names a network. The contract, in the order a daemon uses it:

- `name`, and `block`: the channel's block of agentd ids (`id_block`). Every chat and user id
  a channel hands over lies in its block, so ids never collide across channels, a chat's key
  (`chat.names.chat_key`) is unique, and an output is routed by its chat id alone
  (`chat.route`). Telegram is block 0: its own ids, unchanged, so every row stored before
  channels existed still names the right chat. A channel with string addresses (a Matrix
  room) keeps its own table from address to an id in its block.
- `section`: its own configuration section (`[telegram]`, `[matrix]`), a name and a pydantic
  model (`config.sections.Section`); the loader validates it with the rest of the file,
  and the channel reads it back with `section.of(config)`. Keys of it that became
  channel-neutral (`[access]`, `[chat]`) are declared there as moved, and still load.
- `migrations`: its own tables, a list of `db.migrations.Migration` named in its own set
  (`matrix/…`), applied after the core's and recorded like them (a step the core list
  applied before the channel owned it names it in `formerly`, and is not run again).
- `kept(config)`: its own tables retention keeps short (`chat.kept.KeptTable`: what
  its intake took, by `[retention] update_days`; its own transcript, by `message_days`),
  pruned in the daily run and by `agentd prune` with the core's parts, configured or not
  (rows from when it was on still age out).
- `enabled(config)`: whether it is configured; a channel that is not is never imported
  beyond this module (its network library included).
- `secret_names(config)` / `secret_values(config)` / `checks(config, probe)`: what the
  redactor hides and what `agentd doctor` reports, as for a capability.
- `open(ctx)`: build the client, no network yet (it may run while the database opens);
  returns an `OpenChannel`:
  - `identify(stop)`: who the agent is on this network (waits for the network, capped; a
    rejected credential raises `ConfigProblem`, a stop `StoppedDuringStartUp`);
  - `outbox`: the output side, `chat.outbox.Outbox` — text with formatting (split to fit),
    edits (streamed drafts, approval cards' outcomes), replies, buttons (approval cards, and
    their answers come back as `CallbackPress`), files, typing; a refusal for good raises
    `SendFailed`; credentials the network no longer takes raise what the channel's
    `Refusal` gives (the send waits for a restart, and the intake, run through the same
    latch, ends with it); every send is made inside `chat.delivery.deliver` by the core;
  - `files`: reads a file id it put on an input (photos, voice, documents), or None;
  - `workflows(db)`: its own durable workflows (Telegram's: leaving a group nobody allowed);
  - `serve(intake)`: start taking messages. Intake is persist-then-acknowledge: an input is
    committed in one transaction with the workflow it starts (`Intake.engine.prepare_start`,
    instance id derived from the network's message id, key `chat_key`) and only then
    acknowledged to the network, so a crash loses nothing and repeats nothing. Every input
    says where it is (`chat_kind`, `chat.inputs`), and only the channel reads its network's
    ids. Who wrote is an agentd user: in the same transaction the channel maps each of its
    accounts to the user it speaks for (`access.accounts.user_of`), redeems a `/start CODE`
    with `access.pairing.redeem(..., channel=name)` (a code made for a user links the
    account to them), serves the accounts `access.accounts.served_accounts` lists, and notes
    each private message with `chat.reach.note_private_chat` (notices and approval cards find
    the user there). Commands go to `Intake.on_command`, button presses to
    `Intake.on_callback`, both inside the same transaction. Returns the running task; it ends
    only on a fatal error;
  - `publish_menu(everyone, owner, owner_id)`: the command menu, best effort;
  - `stop()` then `close()`: stop intake, then release the client;
  - `web` (optional, `WebPages`): a channel whose network is the owner's browser (the web
    chat) serves its pages inside the dashboard, behind the dashboard's login, CSRF and
    Origin checks; the daemon hands every open channel's `web` to the dashboard.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import contextlib

    from agentd.chat.busy import BusyMode
    from agentd.chat.inputs import CallbackPress, TurnInput
    from agentd.chat.kept import KeptTable
    from agentd.chat.outbox import Outbox
    from agentd.config import Config, SecretSource
    from agentd.config.sections import Section
    from agentd.db import Database
    from agentd.db.migrations import Migration
    from agentd.durable import Engine
    from agentd.runtime.redact import Redactor

# Telegram's ids have at most 52 significant bits; one block holds every id of one channel.
ID_BLOCK = 2**53


def id_block(chat_or_user_id: int) -> int:
    """The block an agentd chat or user id lies in: 0 for Telegram's own (either sign)."""
    return 0 if -ID_BLOCK < chat_or_user_id < ID_BLOCK else chat_or_user_id // ID_BLOCK


def block_start(block: int) -> int:
    """The first id of `block` (not 0): where a channel numbers its chats and users from."""
    return block * ID_BLOCK


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""


class StoppedDuringStartUp(StartupError):
    """Asked to stop (SIGTERM, Ctrl-C) before start-up finished: a clean stop, not a failure."""


class ConfigProblem(StartupError):
    """A configuration problem (exit code 78): a missing or malformed secret, a bad token."""


class CredentialsRejected(ConfigProblem):
    """A channel's network no longer takes its credentials (a revoked token, a logged-out
    device): its intake ends with this, and the message says what to change."""

    # A step that meets it (a send) waits for the next start instead of failing (the durable
    # engine's rule), so what agentd would have said goes out once the owner fixed it.
    needs_restart = True


class Refusal:
    """One channel's latch for credentials its network refused, set by whichever side meets
    the refusal first. A send raises what `refuse()` returns (its step waits for the next
    start); the intake, run through `serve`, then ends with it, which stops agentd, as when
    the intake met the refusal itself."""

    def __init__(self, problem: Callable[[], CredentialsRejected]) -> None:
        self._problem = problem
        self._met: CredentialsRejected | None = None
        self._event = asyncio.Event()

    @property
    def met(self) -> CredentialsRejected | None:
        """The refusal, once one side met it."""
        return self._met

    def refuse(self) -> CredentialsRejected:
        if self._met is None:
            self._met = self._problem()
            self._event.set()
        return self._met

    async def serve(self, intake: Awaitable[None]) -> None:
        """Run the intake until it ends, or until a send met the refusal: then end with it."""
        running = asyncio.ensure_future(intake)
        met = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({running, met}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            met.cancel()
            if not running.done():
                running.cancel()
            await asyncio.gather(running, met, return_exceptions=True)
        if running.done() and not running.cancelled():
            return running.result()  # the intake's own end (it met the refusal itself)
        assert self._met is not None
        raise self._met


# Runs inside the intake transaction; returns the presser's answer (a toast, "" for none).
CallbackHandler = Callable[[Any, "CallbackPress"], str]
# A message that is a command goes to another workflow: (workflow, its input, key) or None.
# Given the intake transaction too (a message a command waits for is known there).
CommandHook = Callable[["TurnInput", Any], "tuple[str, Any, str] | None"]


def no_callbacks(conn: Any, press: CallbackPress) -> str:
    return "Nothing is waiting for this button any more."


def no_commands(turn: TurnInput, conn: Any = None) -> tuple[str, Any, str] | None:
    return None


@dataclass(frozen=True)
class Intake:
    """What a channel's intake hands its inputs to (see the module's `serve`)."""

    db: Database
    engine: Engine
    on_command: CommandHook = no_commands
    on_callback: CallbackHandler = no_callbacks
    busy: BusyMode = "queue"  # what a message does while a turn of its chat works
    # Called by a live intake loop after each round (the systemd watchdog).
    on_progress: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class ChannelIdentity:
    """Who the agent is on one network."""

    bot_id: int
    username: str = ""  # a command may name it ("/help@username"); "" where none does


@dataclass
class ChannelContext:
    """What a channel is opened with."""

    config: Config
    secrets: SecretSource
    stack: contextlib.AsyncExitStack
    # A send whose answer was lost (method, chat id, reason): counted as `send_uncertain`.
    on_uncertain: Callable[[str, int | str | None, str], Awaitable[None]]
    # The process's one redactor: what a channel says outside the log (systemd's STATUS line)
    # goes through it, and a secret the channel is handed at run time (an access token from a
    # password login) is taught to it.
    redactor: Redactor


class CheckLine(Protocol):
    """One line of `agentd doctor` (`tools.capability.Check` is one)."""

    name: str
    ok: bool
    detail: str
    warn: bool


class Files(Protocol):
    def handles(self, file_id: str) -> bool:
        """Whether this file id is one this channel put on an input."""
        ...

    async def download(self, file_id: str, max_bytes: int) -> bytes: ...


class OpenChannel(Protocol):
    outbox: Outbox
    files: Files | None

    def workflows(self, db: Database) -> list[Any]: ...

    async def identify(self, stop: asyncio.Event) -> ChannelIdentity: ...

    def serve(self, intake: Intake) -> asyncio.Task[None]: ...

    async def publish_menu(
        self, everyone: list[tuple[str, str]], owner: list[tuple[str, str]], owner_id: int | None
    ) -> None: ...

    def stop(self) -> None: ...

    async def close(self) -> None: ...


class Channel(Protocol):
    name: str
    block: int
    section: Section[Any]
    migrations: Sequence[Migration]

    def enabled(self, config: Config) -> bool: ...

    def kept(self, config: Config) -> list[KeptTable]: ...

    def secret_names(self, config: Config) -> list[str]: ...

    def secret_values(self, config: Config) -> list[str]: ...

    def checks(self, config: Config, probe: Any) -> list[CheckLine]:
        """`agentd doctor`'s lines; `probe` is a `tools.capability.Probe`."""
        ...

    async def open(self, ctx: ChannelContext) -> OpenChannel: ...


@dataclass(frozen=True)
class WebPages:
    """Pages a channel serves inside the owner's dashboard (`OpenChannel.web`).

    `add(app, csrf_of)` adds its routes to the dashboard's aiohttp application, whose
    middleware has already refused any request without a live session, any POST from another
    origin and any POST whose form lacks the session's `csrf` token; `csrf_of(request)` is that
    token, for the channel's own pages to put in their forms. `path` and `title` are its
    entry in the dashboard's navigation. `chats` are the chats written in on these pages: who
    writes there is signed in to the dashboard already."""

    path: str
    title: str
    add: Callable[[Any, Callable[[Any], str]], None]
    chats: frozenset[int] = frozenset()


@dataclass
class Opened:
    """One open channel as the daemon keeps it."""

    channel: Channel
    open: OpenChannel
    identity: ChannelIdentity | None = None
    task: asyncio.Task[None] | None = None
