"""Which shell commands may run without asking: the read-only allowlist and "Always allow this".

A rule names a program and a pattern its arguments must match. Only a *plain* command can match
a rule or the allowlist: one program with arguments, nothing the shell would read as chaining
(`;` `&&` `||` `&` newline), piping (`|`), substitution (`$(…)`, backticks, `$VAR`),
redirection (`<` `>`), grouping or comments. Such characters anywhere, quoted or not, make
the command ask afresh: checking the raw text for them is stricter than any parse, and what the
rule saw (shlex's words) is then exactly what `sh -c` runs, globs aside.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import sqlite3
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentd.access import approvals
from agentd.chat.names import chat_actor
from agentd.ledger import audit

# Every character sh gives a meaning beyond "part of a word" except quotes and globs.
_SHELL_META = set(";&|<>()$`\\\n\r#{}!")
CALLBACK_PREFIX = "ar"


class Plain(BaseModel):
    """A command that is one program and its arguments, or why it is not."""

    argv: list[str] = []
    why_not: str = ""

    @property
    def ok(self) -> bool:
        return not self.why_not


def parse(command: str) -> Plain:
    """The words of a plain command, or why it cannot be rule-matched."""
    bad = sorted({ch for ch in command if ch in _SHELL_META})
    if bad:
        return Plain(
            why_not=f"it uses shell syntax ({' '.join(bad)}): chained, piped, "
            "substituted or redirected commands always ask"
        )
    if any(unicodedata.category(ch)[0] == "C" for ch in command):
        return Plain(why_not="it contains control characters")
    try:
        argv = shlex.split(command, comments=False, posix=True)
    except ValueError as exc:
        return Plain(why_not=f"it does not parse ({exc})")
    if not argv:
        return Plain(why_not="it is empty")
    if "=" in argv[0]:
        return Plain(why_not="it sets variables before the program")
    return Plain(argv=argv)


# Programs whose behaviour is the content of a file or an argument they run: a rule for
# `make` or `python3 report.py` would run whatever those files say next time, so none is
# offered or honoured (each call asks). The list errs wide: a build tool, an interpreter, a
# shell, a program that runs another (env, xargs, timeout), or one with a run-a-command option
# (find -exec, tar --to-command, git hooks, sed's e, awk's system(), rsync -e, less's !).
_EXECUTORS = frozenset(
    """sh bash dash zsh fish ksh mksh csh tcsh busybox env xargs nice nohup timeout stdbuf
    setsid sudo su doas runuser time watch strace ltrace gdb valgrind chroot unshare nsenter
    flock parallel python python2 python3 pypy pypy3 perl ruby irb node nodejs deno bun php
    lua luajit tclsh wish rscript julia java javac kotlin scala groovy go cargo rustc gcc cc
    g++ c++ clang clang++ tcc make gmake cmake ninja meson scons bazel gradle mvn ant npm npx
    yarn pnpm pip pip3 pipx uv uvx poetry pdm hatch tox nox pytest bundle gem rake composer
    dotnet mono awk gawk mawk nawk sed find tar git vim vi nvim nano emacs ed ex less more man
    ssh scp rsync docker podman kubectl systemd-run ansible ansible-playbook terraform
    sqlite3 psql mysql dpkg apt apt-get crontab at batch expect jupyter ipython""".split()
)
_VERSIONED = re.compile(r"(python|pypy|perl|ruby|php|lua|node|pip|gcc|g\+\+|clang)[\d.-]*")


def executes_files(program: str) -> bool:
    """Whether what `program` does is decided by files or arguments it runs (no rule)."""
    if "/" in program:  # ./build.sh, /usr/bin/python3: a path names a file that may change
        return True
    name = program.lower()
    return name in _EXECUTORS or _VERSIONED.fullmatch(name) is not None


def args_text(argv: list[str]) -> str:
    return shlex.join(argv[1:])


def exact_pattern(argv: list[str]) -> str:
    """A pattern matching exactly these arguments (glob characters made literal)."""
    text = args_text(argv)
    return "".join(f"[{ch}]" if ch in "*?[" else ch for ch in text)


def pattern_matches(pattern: str, argv: list[str]) -> bool:
    return fnmatch.fnmatchcase(args_text(argv), pattern)


class Rule(BaseModel):
    id: int
    program: str
    args_pattern: str
    created_at: float
    created_by: str
    approval_id: str | None = None


_COLUMNS = "id, program, args_pattern, created_at, created_by, approval_id"


def _rule(row: Any) -> Rule:
    return Rule.model_validate(dict(zip(_COLUMNS.split(", "), row, strict=True)))


def list_rules(conn: Any) -> list[Rule]:
    return [_rule(r) for r in conn.execute(f"SELECT {_COLUMNS} FROM shell_rules ORDER BY id")]


def add_rule(conn: Any, program: str, pattern: str, by: str, approval_id: str | None) -> Rule:
    now = time.time()
    # A rule holds in the chat (and for the user) of the approval that made it: approving the
    # same command again elsewhere moves it there.
    conn.execute(
        "INSERT INTO shell_rules (program, args_pattern, created_at, created_by, approval_id) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (program, args_pattern) DO UPDATE SET "
        "created_at = excluded.created_at, created_by = excluded.created_by, "
        "approval_id = excluded.approval_id",
        (program, pattern, now, by, approval_id),
    )
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM shell_rules WHERE program = ? AND args_pattern = ?",
        (program, pattern),
    ).fetchone()
    rule = _rule(row)
    audit.record(
        conn,
        "shell_rule_added",
        detail={
            "rule": rule.id,
            "program": program,
            "args_pattern": pattern,
            "by": by,
            "approval": approval_id,
        },
        at=now,
    )
    return rule


def remove_rule(conn: Any, rule_id: int, by: str) -> Rule | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM shell_rules WHERE id = ?", (rule_id,)).fetchone()
    if row is None:
        return None
    rule = _rule(row)
    conn.execute("DELETE FROM shell_rules WHERE id = ?", (rule_id,))
    audit.record(
        conn,
        "shell_rule_removed",
        detail={
            "rule": rule.id,
            "program": rule.program,
            "args_pattern": rule.args_pattern,
            "by": by,
        },
    )
    return rule


def matching_rule(
    conn: Any, argv: list[str], chat_id: int | None = None, user_id: int | None = None
) -> Rule | None:
    """The first rule for this command that holds here: one made on a card holds only in that
    card's chat and for the user whose command it was (their workspace); one made elsewhere
    (no approval on record) holds for every chat."""
    if executes_files(argv[0]):
        return None  # a rule stored before such programs were refused no longer counts
    cols = ", ".join(f"r.{c}" for c in _COLUMNS.split(", "))
    rows = conn.execute(
        f"SELECT {cols}, a.chat_id, a.user_id FROM shell_rules r "
        "LEFT JOIN approvals a ON a.id = r.approval_id WHERE r.program = ? ORDER BY r.id",
        (argv[0],),
    ).fetchall()
    for row in rows:
        rule = _rule(row[:-2])
        scope_chat, scope_user = row[-2], row[-1]
        if scope_chat is not None and (scope_chat != chat_id or scope_user != user_id):
            continue
        if pattern_matches(rule.args_pattern, argv):
            return rule
    return None


class RuleBook:
    """Rule look-ups for `assess`, which is synchronous: a read-only connection of its own,
    so a rule removed with `agentd rules rm` stops matching at the very next call."""

    def __init__(self, db_path: Path) -> None:
        self._path = db_path
        self._conn: sqlite3.Connection | None = None

    def match(
        self, argv: list[str], chat_id: int | None = None, user_id: int | None = None
    ) -> Rule | None:
        if self._conn is None:
            uri = f"file:{self._path}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=1.0)
        try:
            return matching_rule(self._conn, argv, chat_id, user_id)
        except sqlite3.Error:
            return None  # no rule can be read: the command asks, which is the safe side

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# -- "Always allow this" --------------------------------------------------------------------


def offer(conn: Any, approval_id: str, argv: list[str]) -> None:
    """Remember the rule the card's third button would add (the approval stores no argv)."""
    conn.execute(
        "INSERT OR IGNORE INTO shell_rule_offers (approval_id, program, args_pattern) "
        "VALUES (?, ?, ?)",
        (approval_id, argv[0], exact_pattern(argv)),
    )


def offered(conn: Any, approval_id: str) -> tuple[str, str] | None:
    row = conn.execute(
        "SELECT program, args_pattern FROM shell_rule_offers WHERE approval_id = ?", (approval_id,)
    ).fetchone()
    return (row[0], row[1]) if row else None


def always_callback_data(approval_id: str) -> str:
    return f"{CALLBACK_PREFIX}:{approval_id}"


def approve_always(conn: Any, approval_id: str, by: str) -> str:
    """Approve the pending call and store its rule, in one transaction; the answer to show.
    The caller has checked the press (callback_handler): a rule widens what runs unasked."""
    rule = offered(conn, approval_id)
    if rule is None:
        return "This button is not recognised."
    decided = approvals.decide(conn, approval_id, approve=True, by=by)
    if not decided.ok:
        return decided.message
    stored = add_rule(conn, rule[0], rule[1], by, approval_id)
    return f"Approved, and from now on allowed: {stored.program} {stored.args_pattern}".strip()


def callback_handler(may_approve: Callable[[int], bool]) -> Callable[[Any, Any], str]:
    """The "Always allow this" button, inside the intake transaction (like approvals').

    It decides the approval, so it gets the very check of the Approve / Deny buttons: an
    approver (`may_approve`), on the card itself (its chat and message), or it is refused and
    audited. The rule holds in that card's chat, for that card's user (matching_rule)."""

    def handle(conn: Any, press: Any) -> str:
        approval_id = press.data.split(":", 1)[1] if ":" in press.data else ""
        if offered(conn, approval_id) is None:
            return "This button is not recognised."
        refused = approvals.check_press(conn, press, approval_id, may_approve)
        if refused is not None:
            return refused
        return approve_always(conn, approval_id, chat_actor(press.user_id))

    return handle
