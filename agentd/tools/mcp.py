"""Tools from MCP servers named in `[[tools.mcp]]`, through the official `mcp` SDK.

`async with McpServers(config.tools.mcp, redact=redactor) as mcp:` connects every server
(stdio or streamable HTTP) at once; `mcp.tools` are ready to register and `mcp.problems`
names the servers that could not be reached. Each server lives in its own task, so one that
crashes later cannot take the daemon's task down with it: its tools then answer with an error.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO

from agentd.config import Config, McpServerConfig
from agentd.runtime.redact import Redactor
from agentd.tools.base import (
    ArgsParser,
    InvalidArguments,
    Tool,
    ToolContext,
    ToolError,
    ToolProblem,
    ToolResult,
    mark_untrusted,
)
from agentd.tools.capability import Check, Checks, Context, Contribution, Probe, Simple

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult
    from mcp.types import Tool as McpTool

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_PAGES = 100
_MAX_DESCRIPTION = 2000
# Time a server gets to shut down cleanly before its task is cancelled.
_STOP_GRACE = 10.0
# A stdio server's stderr is logged line by line: each line cut to this many characters, at
# most this many lines a minute per server (the rest counted), so a chatty or looping server
# cannot flood the journal; a line is read whole up to _STDERR_READ bytes before it is cut.
_STDERR_LINE = 1000
_STDERR_PER_MINUTE = 120
_STDERR_READ = 64 * 1024
# Time the reader gets to log what a stopped server wrote last before the pipe is closed.
_STDERR_DRAIN = 2.0
STDERR_PREFIX = "MCP server stderr: "  # each such line's start in the log


def tool_name(server: str, name: str) -> str:
    """`server__tool`, cut to Anthropic's 64-character rule with unusable characters replaced."""
    return _UNSAFE.sub("_", f"{server}__{name}")[:64]


def _leaf(exc: BaseException) -> BaseException:
    # anyio wraps transport failures in (nested) exception groups; the first leaf says why.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    leaf = _leaf(exc)
    if isinstance(leaf, OSError) and leaf.strerror:
        return f"{leaf.strerror}" + (f": {leaf.filename}" if leaf.filename else "")
    text = (str(leaf).strip().splitlines() or [""])[0][:300]
    message = getattr(leaf, "message", None)
    if isinstance(message, str) and message:
        text = message[:300]
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def _schema_parser(schema: Mapping[str, Any]) -> ArgsParser:
    """Check arguments against the server's JSON schema before the call, when it is usable."""
    try:
        import jsonschema

        validator_cls = jsonschema.validators.validator_for(schema)
        validator_cls.check_schema(schema)
        validator = validator_cls(schema)
    except Exception:
        validator = None  # a schema we cannot read: the server still validates

    def parse(raw: dict[str, Any]) -> dict[str, Any]:
        if validator is not None:
            errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
            if errors:
                lines = [
                    f"- {'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}"
                    for e in errors[:10]
                ]
                raise InvalidArguments("\n".join(lines))
        return raw

    return parse


def _result_text(result: CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        if block.type == "text":
            parts.append(block.text)
        elif block.type in ("image", "audio"):
            parts.append(f"[{block.type} ({block.mime_type}) not shown]")
        elif block.type == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if text is not None else f"[binary resource {block.resource.uri}]")
        elif block.type == "resource_link":
            parts.append(f"[resource {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts) or "(no content)"


class _StderrLog:
    """Logs one server's stderr lines through this module's logger, capped in length and rate."""

    def __init__(self, server: str, redact: Redactor, secrets: Iterable[str]) -> None:
        self._server = server
        # The process's redactor (what it learns later too) and the values this server was
        # handed: both before a line is cut, so a cut cannot leave a piece of a secret that
        # the log's redactor no longer recognises.
        self._redact = redact
        self._handed = Redactor(secrets)
        self._window: float | None = None  # when the current minute began
        self._logged = 0
        self._dropped = 0

    def line(self, raw: bytes, now: float) -> None:
        if self._window is None or now - self._window >= 60.0:
            self.flush()
            self._window, self._logged = now, 0
        if self._logged >= _STDERR_PER_MINUTE:
            self._dropped += 1
            return
        self._logged += 1
        text = self._redact(self._handed(raw.decode("utf-8", "replace").rstrip("\r\n")))
        if len(text) > _STDERR_LINE:
            text = text[:_STDERR_LINE] + " …"
        log.info(STDERR_PREFIX + "%s", text, extra={"mcp_server": self._server})

    def flush(self) -> None:
        if self._dropped:
            log.warning(
                "MCP server stderr: %d lines not logged (more than %d a minute)",
                self._dropped,
                _STDERR_PER_MINUTE,
                extra={"mcp_server": self._server},
            )
            self._dropped = 0


async def _read_lines(stream: asyncio.StreamReader, sink: _StderrLog) -> None:
    loop = asyncio.get_running_loop()
    buffer = b""
    skipping = False  # the rest of a line longer than _STDERR_READ, already logged
    try:
        while chunk := await stream.read(_STDERR_READ):
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                if not skipping:
                    sink.line(buffer[:end], loop.time())
                skipping, buffer = False, buffer[end + 1 :]
            if len(buffer) >= _STDERR_READ:
                if not skipping:
                    sink.line(buffer, loop.time())
                skipping, buffer = True, b""
        if buffer and not skipping:
            sink.line(buffer, loop.time())
    finally:
        sink.flush()


@asynccontextmanager
async def _stderr_to_log(
    server: str, redact: Redactor, secrets: Iterable[str]
) -> AsyncIterator[TextIO]:
    """A file to give a stdio server as its stderr; what it writes there is logged.

    Left to the SDK, the server would write to the daemon's own stderr (the journal) past the
    log's redactor, and a server handed a token by `pass_env` may well print it.
    """
    read_fd, write_fd = os.pipe()
    reading = os.fdopen(read_fd, "rb", buffering=0)
    writing = os.fdopen(write_fd, "w")  # the SDK hands its fileno to the child
    transport: asyncio.BaseTransport | None = None
    task: asyncio.Task[None] | None = None
    try:
        stream = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), reading
        )
        task = asyncio.create_task(
            _read_lines(stream, _StderrLog(server, redact, secrets)), name=f"mcp-stderr:{server}"
        )
        yield writing
    finally:
        # With our end closed and the server stopped, the reader comes to the pipe's end; a
        # process the server left behind may hold it open, so the wait is bounded.
        writing.close()
        if task is not None:
            await asyncio.wait({task}, timeout=_STDERR_DRAIN)
            task.cancel()
        if transport is not None:
            transport.close()
        else:
            reading.close()


class _Server:
    """One connected server, owned by its own task from connect to close."""

    def __init__(
        self, config: McpServerConfig, environ: Mapping[str, str], redact: Redactor
    ) -> None:
        self.config = config
        self._environ = environ
        self._redact = redact
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.warnings: list[str] = []

    async def _enter_client(self, stack: AsyncExitStack) -> Client:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.types import Implementation

        cfg = self.config
        info = Implementation(name="agentd", version="0.1")
        if cfg.command is not None:
            env = dict(cfg.env)
            for name in cfg.pass_env:
                if name in self._environ:
                    env[name] = self._environ[name]
                else:
                    self.warnings.append(f"pass_env names {name}, which is not set")
            params = StdioServerParameters(
                command=cfg.command, args=cfg.args, env=env or None, cwd=cfg.cwd
            )
            errlog = await stack.enter_async_context(
                _stderr_to_log(cfg.name, self._redact, env.values())
            )
            transport = stdio_client(params, errlog=errlog)
            return await stack.enter_async_context(Client(transport, client_info=info))

        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert cfg.url is not None
        headers = dict(cfg.headers)
        if cfg.bearer_token_env:
            token = self._environ.get(cfg.bearer_token_env)
            if not token:
                raise RuntimeError(f"bearer_token_env names {cfg.bearer_token_env}, which is unset")
            headers["Authorization"] = f"Bearer {token}"
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
        )
        transport = streamable_http_client(cfg.url, http_client=http)
        return await stack.enter_async_context(Client(transport, client_info=info))

    async def _serve(self, ready: asyncio.Future[list[McpTool]]) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await self._enter_client(stack)
                listed: list[McpTool] = []
                cursor: str | None = None
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._client = client
                ready.set_result(listed)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning(
                    "MCP server disconnected: %s",
                    _describe(exc),
                    extra={"mcp_server": self.config.name},
                )
        finally:
            self._client = None
            if not ready.done():
                ready.set_exception(RuntimeError("stopped before it connected"))

    async def start(self) -> list[McpTool]:
        """Connect and list the server's tools; raises with the reason when it cannot."""
        ready: asyncio.Future[list[McpTool]] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._serve(ready), name=f"mcp:{self.config.name}")
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.config.connect_timeout)
        except BaseException:
            await self.stop(graceful=False)
            if ready.done() and not ready.cancelled():
                ready.exception()  # retrieved: the caller reports it, asyncio need not
            raise

    async def stop(self, *, graceful: bool = True) -> None:
        """Close the session and the server; a server that never connected is cancelled."""
        self._stop.set()
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=_STOP_GRACE if graceful else 0)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=_STOP_GRACE)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        client = self._client
        if client is None:
            raise ToolError(f"MCP server {self.config.name!r} is not connected.")
        from mcp import MCPError

        try:
            result = await client.call_tool(name, arguments)
        except MCPError as exc:
            raise ToolError(f"MCP server {self.config.name!r}: {exc.message}") from None
        source = f"mcp:{self.config.name}/{name}"
        return ToolResult(
            content=mark_untrusted(_result_text(result), source), is_error=result.is_error
        )

    def as_tool(self, listed: McpTool) -> Tool:
        """A registry tool whose implementation is `call_tool` on this server."""
        cfg = self.config
        mcp_name = listed.name
        description = (listed.description or listed.title or f"The {mcp_name} tool").strip()

        async def call(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
            return await self.call(mcp_name, args)

        schema = dict(listed.input_schema)
        return Tool(
            name=tool_name(cfg.name, mcp_name),
            # The description is the server's words: say whose, so the model can weigh them.
            description=f"[from MCP server {cfg.name}] {description}"[:_MAX_DESCRIPTION],
            input_schema=schema,
            fn=call,
            parse_args=_schema_parser(schema),
            risk=cfg.risk,
            timeout=cfg.timeout,
            source=f"mcp:{cfg.name}",
            # Another program's answers are outside content, and it may reach the network.
            taints=True,
            egress=True,
        )


class McpServers:
    """Connects the configured MCP servers on entry and closes them on exit.

    Unreachable or broken servers become `problems` (and log lines); entering never raises.
    """

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        *,
        redact: Redactor,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._configs = list(servers)
        # The process's one redactor: a server's stderr goes through it before it is cut.
        self._redact = redact
        # What pass_env and bearer_token_env read: the one secret reader's mapping.
        self._environ = os.environ if environ is None else environ
        self._servers: list[_Server] = []
        self.tools: list[Tool] = []
        self.problems: list[ToolProblem] = []

    async def __aenter__(self) -> McpServers:
        if not self._configs:
            return self
        try:
            import mcp  # noqa: F401
        except ImportError:
            for cfg in self._configs:
                self._problem(cfg, "the mcp package is not installed: pip install 'agentd[mcp]'")
            return self
        servers = [_Server(cfg, self._environ, self._redact) for cfg in self._configs]
        results = await asyncio.gather(*(s.start() for s in servers), return_exceptions=True)
        for server, result in zip(servers, results, strict=True):
            for warning in server.warnings:
                self._problem(server.config, warning)
            if isinstance(result, BaseException):
                if isinstance(result, TimeoutError):
                    reason = f"no answer within {server.config.connect_timeout:g} s"
                else:
                    reason = _describe(result)
                self._problem(server.config, f"could not connect: {reason}")
                continue
            self._servers.append(server)
            self._add_tools(server, result)
        return self

    def _add_tools(self, server: _Server, listed: list[McpTool]) -> None:
        seen: set[str] = set()
        for item in listed:
            try:
                tool = server.as_tool(item)
            except ValueError as exc:
                self._problem(server.config, f"tool {item.name!r} skipped: {exc}")
                continue
            if tool.name in seen:
                self._problem(server.config, f"tool {item.name!r} skipped: {tool.name} is taken")
                continue
            seen.add(tool.name)
            self.tools.append(tool)
        log.info(
            "MCP server connected",
            extra={"mcp_server": server.config.name, "tools": len(seen)},
        )

    def by_server(self) -> dict[str, list[Tool]]:
        """The connected servers' tools, by server name (a server with no tools: [])."""
        found: dict[str, list[Tool]] = {s.config.name: [] for s in self._servers}
        for tool in self.tools:
            found[tool.source.removeprefix("mcp:")].append(tool)
        return found

    def _problem(self, cfg: McpServerConfig, message: str) -> None:
        problem = ToolProblem(f"mcp:{cfg.name}", message)
        log.warning("MCP problem: %s", problem)
        self.problems.append(problem)

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.gather(*(s.stop() for s in self._servers), return_exceptions=True)
        self._servers.clear()


def _mcp_secret_names(config: Config) -> list[str]:
    names: list[str] = []
    for server in config.tools.mcp:
        names += [*server.pass_env, server.bearer_token_env or ""]
    return names


def _mcp_secret_values(config: Config) -> list[str]:
    """Secrets written in the config itself: env values, headers ("Bearer xyz" and "xyz")."""
    found: list[str] = []
    for server in config.tools.mcp:
        found += server.env.values()
        for value in server.headers.values():
            found += [value, value.partition(" ")[2]]
    return found


async def _mcp_build(ctx: Context) -> Contribution:
    mcp = await ctx.stack.enter_async_context(
        McpServers(ctx.config.tools.mcp, redact=ctx.redactor, environ=ctx.secrets)
    )
    problems = [f"{p.source}: {p.message}" for p in mcp.problems]
    offered, held = await _confirmed_only(ctx, mcp.by_server())
    problems += [f"mcp:{name}: held back: {why}" for name, why, _ in held]
    tell = _teller(ctx)

    async def tell_held() -> None:
        for name, why, found in held:
            await tell(name, why, found)

    return Contribution(
        tools=offered,
        problems=problems,
        start=[tell_held],
        about="use the tools of your MCP servers",
    )


async def _confirmed_only(
    ctx: Context, servers: Mapping[str, list[Tool]]
) -> tuple[list[Tool], list[tuple[str, str, str]]]:
    """The tools of servers whose listing the owner confirmed as it is; the rest, with why."""
    from agentd.tools import mcp_pins

    pinned = await ctx.db.read(mcp_pins.pins)
    offered: list[Tool] = []
    held: list[tuple[str, str, str]] = []
    for name, tools in servers.items():
        found = mcp_pins.digest(mcp_pins.listed(tools))
        why = mcp_pins.verdict(pinned.get(name), found)
        if why:
            await ctx.db.write(mcp_pins.held_back, name, found, ctx.clock.now())
            held.append((name, why, found))
        else:
            offered += tools
    return offered, held


def _teller(ctx: Context) -> Callable[[str, str, str], Awaitable[None]]:
    """Tells the owner a server is held back, once per server and listing found."""
    from agentd.access import owners
    from agentd.chat.markup import literal
    from agentd.chat.notice import post_notice

    owner = owners.resolve(ctx.config.access).owner_id

    async def tell(name: str, why: str, found: str) -> None:
        if owner is None:
            return  # the start-up log and `agentd mcp ls` still say it
        text = (
            f"⚠️ The MCP server {literal(name)} is held back: {why}. Its tools are not offered "
            f"until you read them and run `agentd mcp trust {name}` on the server (then restart "
            "agentd): their descriptions go into every conversation as if you wrote them."
        )
        key = hashlib.sha256(f"{name}\0{found}".encode()).hexdigest()[:16]
        instance = f"mcp-held-{name}-{key}"
        await post_notice(ctx.engine.start, instance, None, text, user_id=owner)

    return tell


def _doctor(config: Config, probe: Probe) -> list[Check]:
    """Each configured server the owner has not trusted as it is: its tools are not offered."""
    from agentd.tools.mcp_pins import pins

    def pinned(conn: Any) -> dict[str, Any]:
        try:
            return pins(conn)
        except Exception:  # a database from before MCP pins: nothing confirmed yet
            return {}

    found = probe.read(pinned) or {} if config.tools.mcp else {}
    results = Checks()
    for server in config.tools.mcp:
        pin = found.get(server.name)
        fix = f"read its tools and run `agentd mcp trust {server.name}`"
        if pin is None:
            results.add(f"mcp {server.name}", True, f"not offered until trusted: {fix}", warn=True)
        elif pin.seen_digest and pin.seen_digest != pin.digest:
            results.add(
                f"mcp {server.name}", True, f"held back, its tools changed: {fix}", warn=True
            )
        else:
            results.add(f"mcp {server.name}", True, f"trusted ({len(pin.listing)} tools)")
    return results


def capability() -> Simple:
    """MCP servers' tools, connected at start and closed at shutdown."""
    return Simple(
        "mcp",
        build=_mcp_build,
        secrets=_mcp_secret_names,
        values=_mcp_secret_values,
        doctor=_doctor,
    )
