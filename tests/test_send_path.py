"""Every message agentd sends leaves by the one send path (chat/delivery.py `deliver`): a
journaled, marked step whose kill window is counted as `send_uncertain`.

The check reads the source: every use of an outbox's `send_text` / `send_document` outside the
platform adapter must be the send that `deliver` runs — written inside a `deliver(...)` call,
bound to a name passed to one, or inside a function passed to one — or be listed below with
the reason it may bypass the path.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from agentd.channels import packages as channel_packages
from agentd.chat.names import chat_key
from agentd.chat.notice import make_notice_workflow
from agentd.daemon.startup import tell_parked
from agentd.db import Database
from agentd.durable import Engine, FakeClock, store

ROOT = Path(__file__).resolve().parents[1] / "agentd"
SENDS = {"send_text", "send_document"}
# The adapter that implements the sends, and the protocol that declares them.
# The outbox itself, the one send path, and the router that hands each send (already inside
# a deliver step) to its chat's channel.
EXEMPT_FILES = {"chat/outbox.py", "chat/delivery.py", "chat/route.py"}
EXEMPT_PACKAGES = set(channel_packages())
# (file, function): why this send may bypass the path. Keep it short.
BYPASSES = {
    ("hands/shell.py", "show"): (
        "the 'running… 12 s' line under a running command, edited in place and then replaced "
        "by its result: a progress display inside the tool's own step, not a message"
    ),
}


def _names_in(node: ast.AST) -> set[str]:
    """Every plain and attribute name used in an expression (`send`, `self._send_question`)."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


def _is_deliver(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _names_in(node.func) & {"deliver"} != set()


def _functions_with_parents(tree: ast.AST) -> dict[ast.AST, ast.AST | None]:
    """Each node's innermost enclosing function (None at module level)."""
    owner: dict[ast.AST, ast.AST | None] = {}

    def visit(node: ast.AST, fn: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            owner[child] = fn
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else fn
            visit(child, inner)

    visit(tree, None)
    return owner


def delivered_names(tree: ast.AST) -> tuple[set[str], set[ast.AST]]:
    """Names passed to deliver(...) (directly, or bound to a name that is: `send =
    partial(tell_asker, …)`), and every node written inside such an argument."""
    names: set[str] = set()
    nodes: set[ast.AST] = set()
    for node in ast.walk(tree):
        if _is_deliver(node):
            for arg in [*node.args, *(k.value for k in node.keywords)]:  # type: ignore[attr-defined]
                names |= _names_in(arg)
                nodes |= set(ast.walk(arg))
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
    for node in assigns:
        if any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            names |= _names_in(node.value)
            nodes |= set(ast.walk(node.value))
    return names, nodes


def bypasses(source: str, rel: str, elsewhere: frozenset[str] = frozenset()) -> list[str]:
    """The sends in one module that do not go through `deliver` and are not listed.
    `elsewhere`: names other modules pass to deliver (a send step defined here, run there)."""
    tree = ast.parse(source)
    owner = _functions_with_parents(tree)
    delivered, inside = delivered_names(tree)
    delivered = delivered | elsewhere
    wrong = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr in SENDS):
            continue
        fn = owner.get(node)
        name = fn.name if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) else ""
        if node in inside or name in delivered or (rel, name) in BYPASSES:
            continue
        wrong.append(f"agentd/{rel}:{node.lineno} ({name or 'module'}) calls {node.attr}")
    return wrong


def _modules() -> list[tuple[str, str]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in EXEMPT_FILES or rel.split("/")[0] in EXEMPT_PACKAGES:
            continue
        out.append((rel, path.read_text()))
    return out


def test_every_sender_goes_through_deliver() -> None:
    modules = _modules()
    everywhere = frozenset().union(*(delivered_names(ast.parse(src))[0] for _, src in modules))
    wrong = [line for rel, source in modules for line in bypasses(source, rel, everywhere)]
    assert not wrong, (
        "sends outside chat/delivery.deliver (run the send as a deliver step, or list it in "
        "BYPASSES with the reason):\n" + "\n".join(wrong)
    )


def test_every_listed_bypass_still_exists() -> None:
    """A stale entry would let a new sender of the same name through unnoticed."""
    for rel, function in BYPASSES:
        tree = ast.parse((ROOT / rel).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)}
        assert function in names, f"agentd/{rel} has no {function}: remove it from BYPASSES"


def test_the_check_finds_a_bypass() -> None:
    source = """
async def direct(outbox, chat):
    return await outbox.send_text(chat, "hi")

async def through(step, db, outbox, chat):
    await deliver(step, db, "a", chat, partial(outbox.send_text, chat, "hi"))
    send = partial(outbox.send_document, chat, "/f", "f")
    await deliver(step, db, "b", chat, send, method="sendDocument")
    await deliver(step, db, "c", chat, partial(card, outbox, chat))

async def card(outbox, chat):
    return await outbox.send_text(chat, "card")

async def background(self, chat):
    return await self.outbox.send_text(chat, "late")
"""
    assert bypasses(source, "x.py") == [
        "agentd/x.py:3 (direct) calls send_text",
        "agentd/x.py:15 (background) calls send_text",
    ]


async def test_a_parked_workflows_notice_is_a_delivered_instance_of_its_own(
    db: Database,
) -> None:
    """Told outside any workflow (the engine's on_finish), the notice still leaves by deliver:
    as the `notice` instance's marked `send` step, once per parking however often it is told."""
    sent: list[tuple[int, str]] = []

    class Outbox:
        def split(self, markdown: str) -> list[str]:
            return [markdown] if markdown.strip() else []  # no length limit here

        async def send_text(self, chat_id: int, text: str, **_: Any) -> int:
            sent.append((chat_id, text))
            return len(sent)

    engine = Engine(db, clock=FakeClock(auto_advance=True), poll_interval=0.02)
    engine.register(make_notice_workflow(db, Outbox()))  # type: ignore[arg-type]
    await engine.run()
    parked = store.InstanceRecord(
        seq=1,
        id="tg-update-9",
        workflow="turn",
        key=chat_key(7),
        status="errored",
        input="{}",
        output=None,
        error="stopped after 3 crashes",
        created_at=0.0,
        updated_at=0.0,
        finished_at=0.0,
        wake_at=None,
        waiting_for=None,
        runs=3,
        cancel_requested=False,
    )
    await tell_parked(engine.start, parked)
    await tell_parked(engine.start, parked)  # told twice: one notice
    notice = await engine.wait_for("notice-parked-tg-update-9-3")
    await engine.shutdown()
    assert notice.status == "complete"
    assert len(sent) == 1 and sent[0][0] == 7 and "agentd workflows retry tg-update-9" in sent[0][1]
    journal = await db.read(store.load_steps, notice.id)
    assert [s.name for s in journal.values()] == ["send"]
