"""What a capability may contribute, and the one door every capability (built-in or not) uses.

A capability is an object with a `name` and three methods:

- `secret_names(config)`: the names of the secrets it reads (all through
  `agentd.config.read_secret`); the redactor hides their values from logs and the journal.
- `checks(config, secrets)`: what `agentd doctor` reports about it (a login, a sandbox probe).
- `contribute(ctx)`: what the running daemon gets from it, as a `Contribution` it returns
  (nothing is registered by side effect): tools, workflows (and those built with the turn's
  dependencies), chat commands, buttons and the replies commands wait for, its line of /help,
  what the turn reads (prompt sections, media handlers), services to start once the engine
  runs and to stop at shutdown (on `ctx.stack`), what to do with an instance of its
  workflows that ended unfinished, and the problems worth a log line.

The daemon, `agentd doctor` and the redactor loop over one list (`agentd.daemon.capabilities`);
none of them names a capability.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentd.chat.command import AwaitFn, CallbackFn, ChatCommand
    from agentd.config import Config, SecretSource
    from agentd.durable import Clock, Engine
    from agentd.durable.store import InstanceRecord
    from agentd.runtime.redact import Redactor
    from agentd.tools import Tool, ToolRegistry

OnUnfinished = Callable[["InstanceRecord"], Awaitable[None]]


@dataclass(frozen=True)
class Check:
    """One line of `agentd doctor`: ok or FAIL, and a warning when ok but worth a look."""

    name: str
    ok: bool
    detail: str
    warn: bool = False


class Checks(list[Check]):
    def add(self, name: str, ok: bool, detail: str, *, warn: bool = False) -> None:
        self.append(Check(name, ok, detail, warn and ok))


@dataclass(frozen=True)
class Probe:
    """What `agentd doctor` hands a capability's checks: the secrets and a database reader.

    `read(fn)` runs `fn(conn)` on the daemon's database and returns its answer, or None when
    there is no database yet or it may not be opened (another user's, as root).
    """

    secrets: SecretSource
    read: Callable[[Callable[[Any], Any]], Any]


@dataclass
class Context:
    """What a capability is built from: the open core and the one secret reader."""

    config: Config
    secrets: SecretSource
    db: Any
    clock: Clock
    engine: Engine
    outbox: Any
    llm: Any
    # The process's one redactor: call it on what leaves the process; `learn` a secret met
    # at run time (a browser profile's cookies) so the log and the journal hide it too.
    redactor: Redactor
    stack: contextlib.AsyncExitStack  # services that need stopping push their close here
    # Built once and shared: the embedder, the channels' file reader, the memory sign bits;
    # then what capabilities lend (`Contribution.shares`), there by the time services start.
    shared: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Contribution:
    """What one capability gives the running daemon; every field may stay empty."""

    tools: list[Tool] = field(default_factory=list)
    # Offered after every other tool, so an owner's plugin or MCP tool of the same name wins.
    late_tools: list[Tool] = field(default_factory=list)
    workflows: list[Any] = field(default_factory=list)
    # Workflows made from the turn's dependencies (agent.deps.TurnDeps), built once the
    # registry of every capability's tools exists (background tasks run turns of their own).
    turn_workflows: list[Callable[[Any], Any]] = field(default_factory=list)
    # Chat commands (in menu order), button handlers by their data's prefix, and the replies
    # a command waits for (the new text after an Edit button).
    commands: list[ChatCommand] = field(default_factory=list)
    callbacks: dict[str, CallbackFn] = field(default_factory=dict)
    awaits: list[AwaitFn] = field(default_factory=list)
    # What its tools let the agent do, in the words of /help ("" : its name), and what a tool
    # adds to that line when it is offered (the shell needs a sandbox).
    about: str = ""
    about_tools: dict[str, str] = field(default_factory=dict)
    # Keyword arguments of the turn's dependencies this capability fills (vision, voice,
    # docs; a prompt listing with skill_listing and listed_use): what the
    # prompt, the tool loop and the media handlers read, none of them naming a capability.
    turn: dict[str, Any] = field(default_factory=dict)
    # Wraps the button handler: takes its own presses, hands every other one on.
    on_callback: Callable[[Any], Any] | None = None
    on_unfinished: OnUnfinished | None = None
    problems: list[str] = field(default_factory=list)
    # Handed the registry of every capability's tools once all contributed, before the engine
    # runs: a capability that calls tools itself (automations) gets it here.
    wired: list[Callable[[ToolRegistry], None]] = field(default_factory=list)
    # Run once the engine runs (a listener that starts workflows); raise ServiceError. What
    # one returns is awaited first at shutdown, before the engine stops taking work.
    start: list[Callable[[], Awaitable[Callable[[], Awaitable[None]] | None]]] = field(
        default_factory=list
    )
    # What it keeps outside the database and purges in the daily retention run, by name:
    # fn(now) removes what is older than its keep and says how many went (the workspace trash).
    sweeps: dict[str, Callable[[float], int]] = field(default_factory=dict)
    # What it lends the others' services, by name: put in `ctx.shared` once every capability
    # contributed, before any service starts (the browser's sign-in desk, for the dashboard).
    shares: dict[str, Any] = field(default_factory=dict)


class ServiceError(Exception):
    """A capability's service cannot start; the message names the key to fix."""


class Capability(Protocol):
    name: str

    def secret_names(self, config: Config) -> list[str]: ...

    def secret_values(self, config: Config) -> list[str]: ...

    def checks(self, config: Config, probe: Probe) -> list[Check]: ...

    async def contribute(self, ctx: Context) -> Contribution: ...


@dataclass(frozen=True)
class Simple:
    """A capability from plain functions: whatever is left out contributes nothing."""

    name: str
    build: Callable[[Context], Awaitable[Contribution]] | None = None
    secrets: Callable[[Config], list[str]] | None = None
    # Secrets written in the config itself (an MCP server's env values and headers).
    values: Callable[[Config], list[str]] | None = None
    doctor: Callable[[Config, Probe], list[Check]] | None = None

    def secret_names(self, config: Config) -> list[str]:
        return [n for n in (self.secrets(config) if self.secrets else []) if n]

    def secret_values(self, config: Config) -> list[str]:
        return [v for v in (self.values(config) if self.values else []) if v]

    def checks(self, config: Config, probe: Probe) -> list[Check]:
        return self.doctor(config, probe) if self.doctor else []

    async def contribute(self, ctx: Context) -> Contribution:
        return await self.build(ctx) if self.build else Contribution()
