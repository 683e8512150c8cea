"""One way to declare a tool: every flag at the declaration, groups on a Toolset, one owner
guard, and no built-in tool rebuilt afterwards to patch a flag on."""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from agentd.config import AccessConfig, Config
from agentd.tools import (
    ApprovalCard,
    Assessment,
    CallState,
    OwnerOnly,
    Tool,
    ToolContext,
    ToolDeclarationError,
    ToolResult,
    Toolset,
    execute,
    tool,
)
from agentd.tools.plugins import load_plugins

ROOT = Path(__file__).resolve().parents[1] / "agentd"
OWNER = 42


def ctx(user_id: int = OWNER, chat_id: int = OWNER) -> ToolContext:
    kind = "group" if chat_id < 0 else "private"
    return ToolContext(
        chat_id=chat_id, user_id=user_id, instance_id="t", tool_use_id="tu", chat_kind=kind
    )


class Note(BaseModel):
    text: str = Field(description="What to note.")


class Broken(Exception):
    """What a capability raises when its service fails (a MailError, a CalendarError)."""


def _never_cheap(args: Any, state: CallState) -> Assessment | None:
    return None


async def _settled(c: ToolContext, args: Any) -> ToolResult:
    return ToolResult(content="it went")


# -- flags at the declaration ---------------------------------------------------------------


def test_every_flag_is_said_at_the_declaration() -> None:
    def card(args: Note) -> ApprovalCard:
        return ApprovalCard(text=args.text)

    @tool(
        risk="high",
        timeout=5,
        taints=True,
        egress=True,
        at_most_once=True,
        assess=_never_cheap,
        card=card,
        settle=_settled,
        steps=9,
    )
    async def note(c: ToolContext, args: Note) -> str:
        """Write a note."""
        return args.text

    assert (note.risk, note.timeout, note.taints, note.egress, note.at_most_once) == (
        "high",
        5,
        True,
        True,
        True,
    )
    assert note.assess is _never_cheap and note.card is card and note.settle is _settled
    assert note.risk_declared and note.source == f"python:{__name__}" and note.steps == 9


def test_a_toolset_gives_its_source_and_timeout_and_each_tool_its_own_flags() -> None:
    group = Toolset("notes", timeout=12.0, steps=10)

    @group.tool(risk="medium", egress=True)
    async def add_note(c: ToolContext, args: Note) -> str:
        """Add a note."""
        return args.text

    @group.tool(risk="low", timeout=3, taints=True, steps=4, description="Read the notes back.")
    async def read_notes(c: ToolContext) -> str:
        return "notes"

    assert [t.name for t in group.tools()] == ["add_note", "read_notes"]
    assert isinstance(add_note, Tool) and group.tools()[0] is add_note
    assert (add_note.source, add_note.timeout, add_note.risk, add_note.egress) == (
        "notes",
        12.0,
        "medium",
        True,
    )
    assert not add_note.taints and not add_note.at_most_once
    assert (add_note.steps, read_notes.steps) == (10, 4)  # the group's, or the tool's own
    assert (read_notes.timeout, read_notes.taints, read_notes.description) == (
        3,
        True,
        "Read the notes back.",
    )
    assert add_note.input_schema["properties"]["text"]["description"] == "What to note."


def test_a_tool_whose_model_is_known_only_at_run_time() -> None:
    group = Toolset("automation:flows.py")

    async def start(c: ToolContext, args: BaseModel) -> str:
        return "started"

    made = group.add_model(
        name="run_it", description="Start it.", args_model=Note, fn=start, risk="medium"
    )
    assert group.tools() == [made]
    assert (made.source, made.risk, made.args_model) == ("automation:flows.py", "medium", Note)


# -- declaration errors ---------------------------------------------------------------------


def test_a_misspelt_flag_is_refused_at_the_declaration_on_every_door() -> None:
    async def fn(args: Note) -> str:
        """Do it."""
        return ""

    with pytest.raises(ToolDeclarationError, match=r"unknown flag.*egres"):
        tool(risk="high", egres=True)(fn)  # type: ignore[call-arg]
    group = Toolset(source="python:tests")
    with pytest.raises(ToolDeclarationError, match=r"unknown flag.*at_most_one"):
        group.tool(at_most_one=True)(fn)  # type: ignore[call-arg]
    with pytest.raises(ToolDeclarationError, match=r"unknown flag.*taint"):
        group.add_model(name="run_it", description="Run it.", args_model=Note, fn=fn, taint=True)  # type: ignore[call-arg]
    assert group.tools() == []
    made = group.tool(egress=True, at_most_once=True)(fn)
    assert made.egress and made.at_most_once and made.timeout == group.timeout


def test_settle_without_at_most_once_is_a_declaration_error() -> None:
    with pytest.raises(ToolDeclarationError, match="at_most_once"):

        @tool(risk="high", settle=_settled)
        async def send(args: Note) -> str:
            """Send it."""
            return ""

    group = Toolset()
    with pytest.raises(ToolDeclarationError, match="at_most_once"):

        @group.tool(risk="high", egress=True, settle=_settled)
        async def send_too(args: Note) -> str:
            """Send it."""
            return ""

    assert group.tools() == []


def test_hooks_that_do_not_fit_their_call_are_declaration_errors() -> None:
    async def async_assess(args: Any, state: CallState) -> Assessment | None:
        return None

    def sync_settle(c: ToolContext, args: Any) -> ToolResult:
        return ToolResult(content="")

    async def fn(args: Note) -> str:
        """Do it."""
        return ""

    with pytest.raises(ToolDeclarationError, match="assess must be a plain"):
        tool(risk="low", assess=async_assess)(fn)
    with pytest.raises(ToolDeclarationError, match="card must be a plain"):
        tool(risk="low", card="not a function")(fn)  # type: ignore[arg-type]
    with pytest.raises(ToolDeclarationError, match="settle must be an async"):
        tool(risk="low", at_most_once=True, settle=sync_settle)(fn)  # type: ignore[arg-type]


def test_a_toolset_refuses_two_tools_of_one_name_and_a_bad_timeout() -> None:
    group = Toolset("dup")

    @group.tool(risk="low")
    async def same(args: Note) -> str:
        """One."""
        return ""

    async def other(args: Note) -> str:
        """Two."""
        return ""

    with pytest.raises(ToolDeclarationError, match="two tools named 'same'"):
        group.tool(risk="low", name="same")(other)
    with pytest.raises(ToolDeclarationError, match="timeout must be positive"):
        Toolset("slow", timeout=0)

    def not_async(args: Note) -> str:
        """Sync."""
        return ""

    with pytest.raises(ToolDeclarationError, match="async def"):
        group.tool(risk="low")(not_async)  # type: ignore[arg-type]


# -- guard and error mapping ----------------------------------------------------------------


def _guarded_group(ran: list[str]) -> tuple[Toolset, Tool]:
    group = Toolset(guard=OwnerOnly(owner_id=OWNER, refusal="Not yours. Nothing was done."))

    @group.tool(risk="high", at_most_once=True, settle=_settled)
    async def act(c: ToolContext, args: Note) -> str:
        """Act on the owner's data."""
        ran.append(args.text)
        return f"did {args.text}"

    return group, act


async def test_the_guard_runs_before_every_call_and_settle_of_the_group() -> None:
    ran: list[str] = []
    _, act = _guarded_group(ran)
    for stranger in (ctx(user_id=7, chat_id=7), ctx(chat_id=-100)):  # another user; a group
        out = await execute(act, stranger, {"text": "x"})
        assert not out.ok and out.error_kind == "refused"  # agentd's words: no taint
        assert out.content == "Not yours. Nothing was done."
    assert ran == []
    assert act.settle is not None
    with pytest.raises(Exception, match="Not yours"):
        await act.settle(ctx(chat_id=-100), Note(text="x"))
    out = await execute(act, ctx(), {"text": "y"})
    assert out.ok and out.content == "did y" and ran == ["y"]
    assert (await act.settle(ctx(), Note(text="y"))).content == "it went"


async def test_mapped_errors_reach_the_model_as_tool_errors_and_others_do_not() -> None:
    group = Toolset(errors=(Broken,))

    @group.tool(risk="low")
    async def flaky(what: Annotated[str, Field(description="Which failure")]) -> str:
        """Fail in the way asked."""
        if what == "broken":
            raise Broken("the server said no; check the account's password")
        raise RuntimeError("a bug\nwith a traceback-like tail")

    mapped = await execute(flaky, ctx(), {"what": "broken"})
    assert not mapped.ok and mapped.error_kind == "tool_error"
    assert mapped.content == "the server said no; check the account's password"
    other = await execute(flaky, ctx(), {"what": "bug"})
    assert not other.ok and other.error_kind == "exception"


def test_the_owner_guard_knows_the_owner_from_the_telegram_section() -> None:
    configured = OwnerOnly.of(AccessConfig(owner_id=OWNER, allowed_user_ids=[5]), "no")
    assert configured(ctx()) is None
    assert configured(ctx(user_id=5, chat_id=5)) == "no"
    first = OwnerOnly.of(AccessConfig(allowed_user_ids=[5, OWNER]), "no")
    assert first(ctx(user_id=5, chat_id=5)) is None
    nobody = OwnerOnly.of(AccessConfig(), "no")
    assert nobody(ctx()) == "no"


def test_mail_and_calendar_share_the_one_owner_guard() -> None:
    from agentd.calendar.tools import build_calendar_tools
    from agentd.mail.tools import build_mail_tools

    config = _config(Path("/nonexistent"))
    built = [*build_mail_tools(config, None, {}), *build_calendar_tools(config, {})]  # type: ignore[arg-type]
    guards = {
        type(cell.cell_contents)
        for t in built
        for cell in t.fn.__closure__ or ()
        if isinstance(cell.cell_contents, OwnerOnly)
    }
    assert guards == {OwnerOnly}
    for source in ("mail/tools.py", "calendar/tools.py"):
        text = (ROOT / source).read_text()
        assert "ctx.user_id !=" not in text and "def _guard" not in text


# -- plugins --------------------------------------------------------------------------------


def test_a_plugins_toolset_loads_under_the_plugin_rules(tmp_path: Path) -> None:
    (tmp_path / "grouped_plugin.py").write_text(
        "from agentd.tools import Toolset\n\n"
        "notes = Toolset(timeout=7)\n\n"
        "@notes.tool()\nasync def jot(x: int) -> str:\n    '''Jot it.'''\n    return ''\n\n"
        "@notes.tool(risk='low', taints=True)\n"
        "async def peek(x: int) -> str:\n    '''Peek.'''\n    return ''\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        tools, problems = load_plugins(["grouped_plugin"])
    finally:
        sys.path.remove(str(tmp_path))
    assert problems == []
    got = {t.name: (t.risk, t.egress, t.taints, t.timeout, t.source) for t in tools}
    assert got == {
        "jot": ("high", True, False, 7, "plugin:grouped_plugin"),
        "peek": ("low", True, True, 7, "plugin:grouped_plugin"),
    }


# -- no flag patched on later ---------------------------------------------------------------

# What a declaration says about a tool beyond its name and function (`source` is left out:
# other dataclasses have one too; the build below catches a tool's).
FLAGS = {f.name for f in dataclasses.fields(Tool)} - {"name", "description", "fn", "source"}


def test_no_module_patches_a_tools_flags_with_replace() -> None:
    """Only Tool's own methods (a config risk override, a plugin's loader) copy a tool with
    other flags; no other code rebuilds one to change what its declaration says."""
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call):
                continue
            func = call.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            first = call.args[0] if call.args else None
            if path.name == "base.py" and isinstance(first, ast.Name) and first.id == "self":
                continue
            patched = {k.arg for k in call.keywords} & FLAGS
            if name == "replace" and patched:
                wrong.append(f"{path.relative_to(ROOT.parent)}:{call.lineno} sets {patched}")
    assert not wrong, "flags patched on after the declaration:\n" + "\n".join(wrong)


def _config(tmp: Path) -> Config:
    return Config.model_validate(
        {
            "storage": {"path": str(tmp / "agentd.db")},
            "access": {"owner_id": OWNER},
            "tools": {"workspace": {"path": str(tmp / "ws")}, "shell": {"enabled": True}},
            "mail": [
                {
                    "name": "home",
                    "address": "a@example.org",
                    "username": "a",
                    "password_env": "PW",
                    "imap_host": "127.0.0.1",
                    "smtp_host": "127.0.0.1",
                }
            ],
            "calendar": [
                {"name": "c", "url": "http://127.0.0.1:1/c", "username": "a", "password_env": "PW"}
            ],
            "web": {"provider": "tavily", "api_key_env": "TAVILY"},
            "automations": {"modules": ["tests.automations.flows"]},
        }
    )


def _every_capabilitys_tools(config: Config) -> dict[str, list[Tool]]:
    from agentd.automations.catalog import builtin_names, load_catalog
    from agentd.automations.runtime import Runtime
    from agentd.calendar.tools import build_calendar_tools
    from agentd.durable.clock import SystemClock
    from agentd.hands import rules
    from agentd.hands import shell as hands_shell
    from agentd.hands.files import Workspaces, workspace_tools
    from agentd.hands.sandbox import Sandbox
    from agentd.knowledge.tools import docs_tools
    from agentd.mail.tools import build_mail_tools
    from agentd.media.chatdocs import DocDeps, chat_document_tools
    from agentd.memory.tools import memory_tools
    from agentd.schedule.tools import schedule_tools
    from agentd.skills import tools as skills
    from agentd.tools.builtin import builtin_tools
    from agentd.web import build_web_tools

    db: Any = object()  # held by the tools, used only when they run
    embedder: Any = object()
    shell = config.tools.shell
    policy = hands_shell.ShellPolicy(shell=shell, book=rules.RuleBook(config.db_path))
    sdeps = hands_shell.ShellDeps(
        config=config, db=db, sandbox=hands_shell.sandbox_of(config), policy=policy
    )
    runner = skills.ScriptRunner(
        Sandbox(mode="bwrap", bwrap="bwrap", run_as="", hide=()),
        hands_shell.limits_of(shell),
        Workspaces.from_config(config),
    )
    runtime = Runtime(
        config=config,
        db=db,
        clock=SystemClock(),
        catalog=load_catalog(config, builtin_names()),
        outbox=db,
        llm=None,
        kick=lambda key: None,
    )
    return {
        "builtin": builtin_tools(config.tools),
        "memory": memory_tools(db, embedder, config.memory),
        "documents": docs_tools(db, embedder, config),
        "chat documents": chat_document_tools(
            DocDeps(config=config, db=db, files=db, embedder=embedder)
        ),
        "web": build_web_tools(config, {"TAVILY": "key"}, db)[0],
        "schedule": schedule_tools(db, config, lambda key: None),
        "mail": build_mail_tools(config, db, {"PW": "pw"}),
        "calendar": build_calendar_tools(config, {"PW": "pw"}),
        "skills": skills._build(skills.Skills(config, db, runner)),
        "files": workspace_tools(config, db, lambda file_id, limit: db),
        "shell": [hands_shell.shell_tool(sdeps)],
        "automations": runtime.model_tools(),
    }


def test_every_capabilitys_tools_are_built_once_from_their_declaration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Build every capability's tools, watching each Tool being made: none may come out of
    dataclasses.replace (a declaration patched afterwards)."""
    patched: list[str] = []
    made = Tool.__post_init__

    def watch(self: Tool) -> None:
        caller = sys._getframe(2).f_code  # Tool.__init__ is frame 1; who called it is 2
        if caller.co_name == "replace" and caller.co_filename.endswith("dataclasses.py"):
            patched.append(self.name)
        made(self)

    monkeypatch.setattr(Tool, "__post_init__", watch)
    groups = _every_capabilitys_tools(_config(tmp_path))
    assert all(groups.values()), [name for name, tools in groups.items() if not tools]
    assert patched == []
    flagged = {t.name for tools in groups.values() for t in tools if t.taints or t.egress}
    assert {"mail_send", "shell", "write_file", "web_search", "use_skill"} <= flagged
