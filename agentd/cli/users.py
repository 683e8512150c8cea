"""`agentd pair` and `agentd users ls|rm`: who the agent serves, without hunting for user ids."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from pydantic import BaseModel, Field

from agentd.cli.common import (
    ConfigOption,
    JsonOption,
    config_or_exit,
    create_database,
    fail,
    iso,
    new_table,
    out,
    print_json,
    print_table,
    transaction,
)

app = typer.Typer(help="Users the agent serves: list, remove.", no_args_is_help=True)


def pair(
    minutes: Annotated[float, typer.Option(help="How long the code is valid.", min=1)] = 10,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until it is used.")] = True,
    link: Annotated[
        int | None,
        typer.Option(help="Link the account that sends the code to this user (another channel)."),
    ] = None,
    json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Print a one-time code; whoever sends `/start CODE` to the bot is served from then on
    (with --link USER: their account becomes that user, on whichever channel they send it)."""
    from agentd.access import owners, pairing

    cfg = config_or_exit(config)
    conn = create_database(cfg)
    try:
        if link is not None and not owners.is_served(conn, cfg.access, link):
            fail(f"user {link} is not served; see `agentd users ls`")
        with transaction(conn):
            code = pairing.new_code(conn, ttl=minutes * 60, created_by="cli", link_user_id=link)
        if json:
            print_json({"code": code, "expires_in_s": minutes * 60, "link_user_id": link})
            return
        whom = f"from the account to link to user {link}" if link is not None else "to your bot"
        out.print(
            f"Send this {whom}, in a private chat, within {minutes:g} minutes:\n\n"
            f"    /start {code}\n",
            highlight=False,
        )
        if not wait:
            return
        out.print("Waiting for it (the daemon must be running: `agentd run`); Ctrl-C to stop.")
        deadline = time.time() + minutes * 60
        while time.time() < deadline:
            used = conn.execute(
                "SELECT used_by FROM pairing_codes WHERE code_hash = ? "
                "AND link_user_id IS NOT NULL",
                (pairing._hash(code),),
            ).fetchone()
            if used and used[0] is not None:
                out.print(f"Linked: account {used[0]} is now user {link}.", highlight=False)
                return
            row = conn.execute(
                "SELECT p.user_id, p.username FROM pairing_codes c JOIN paired_users p "
                "ON p.user_id = c.used_by WHERE c.code_hash = ?",
                (pairing._hash(code),),
            ).fetchone()
            if row:
                who = f"@{row[1]}" if row[1] else "user"
                out.print(f"Paired: {who} (id {row[0]}) is now served.", highlight=False)
                return
            time.sleep(1)
        fail("the code expired unused; run `agentd pair` again")
    finally:
        conn.close()


def _role(user_id: int, trust: Any) -> str:
    if user_id == trust.owner_id:
        return "owner"
    return "approver" if trust.may_approve(user_id) else "user"


@app.command("ls")
def ls(json: JsonOption = False, config: ConfigOption = None) -> None:
    """Everyone served, with their role: the owner, approvers, config and paired users."""
    from agentd.access import accounts, owners, pairing

    cfg = config_or_exit(config)
    conn = create_database(cfg)
    try:
        paired = pairing.list_paired(conn)
        linked = accounts.accounts_of(conn)
    finally:
        conn.close()
    trust = owners.resolve(cfg.access)
    configured = sorted(owners.configured_ids(cfg.access), key=lambda u: u != trust.owner_id)
    users = [
        {
            "user_id": u,
            "role": _role(u, trust),
            "source": "config",
            "username": "",
            "paired_at": None,
        }
        for u in configured
    ]
    users += [
        {
            "user_id": p.user_id,
            "role": _role(p.user_id, trust),
            "source": "paired",
            "username": p.username,
            "paired_at": iso(p.paired_at),
        }
        for p in paired
        if p.user_id not in configured
    ]
    for user in users:  # the accounts on other channels that speak for this user
        user["accounts"] = [
            f"{a.channel}:{a.account_id}" for a in linked if a.user_id == user["user_id"]
        ]
    if json:
        print_json(users)
        return
    if not users:
        out.print("Nobody is served yet: run `agentd pair`.")
        return
    table = new_table("user id", "role", "source", "username", "paired (UTC)", "accounts")
    for u in users:
        table.add_row(
            str(u["user_id"]),
            str(u["role"]),
            str(u["source"]),
            str(u["username"] or ""),
            str(u["paired_at"] or ""),
            ", ".join(u["accounts"]),  # type: ignore[arg-type]
        )
    empty = "No users yet: add your id to access.allowed_user_ids, or run `agentd pair`."
    print_table(table, drop=("accounts",), empty=empty)
    out.print(trust.describe(), highlight=False)


class Revoked(BaseModel):
    removed: bool
    schedules: list[str] = Field(default_factory=list)
    turns: list[str] = Field(default_factory=list)
    approvals: list[str] = Field(default_factory=list)


def revoke(conn: Any, user_id: int, now: float) -> Revoked:
    """Stop serving a paired user, in one transaction: the pairing goes, their schedules are
    cancelled, their open turns asked to stop and their pending approvals denied (a press
    on a card already sent then changes nothing). Scheduled runs re-check too."""
    from agentd.access import approvals, pairing
    from agentd.chat.names import TURN_WORKFLOW
    from agentd.durable import store
    from agentd.schedule import store as schedules

    done = Revoked(removed=pairing.remove(conn, user_id))
    if not done.removed:
        return done  # a configured user is removed from the config file, not here
    for sched in schedules.list_schedules(conn, user_id=user_id, states=("active", "paused")):
        schedules.set_state(conn, sched, "cancelled", now, by="users rm")
        done.schedules.append(sched.id)
    pending = conn.execute(
        "SELECT id FROM approvals WHERE user_id = ? AND status = 'pending'", (user_id,)
    ).fetchall()
    for (approval_id,) in pending:
        # Decided like a press, so the waiting turn wakes and takes its card down.
        decided = approvals.decide(
            conn,
            approval_id,
            approve=False,
            by=approvals.REVOKED_BY,
            reason="the user was removed",
            now=now,
        )
        if decided.ok:  # an expired one is already settled as it stands
            done.approvals.append(approval_id)
    rows = conn.execute(
        f"SELECT id FROM workflow_instances WHERE workflow = ? AND status IN "
        f"{store.OPEN_STATUSES!r} AND json_extract(input, '$.user_id') = ?",
        (TURN_WORKFLOW, user_id),
    ).fetchall()
    for (instance_id,) in rows:
        store.request_cancel(conn, instance_id, now)
        done.turns.append(instance_id)
    return done


@app.command("rm")
def rm(user_id: int, json: JsonOption = False, config: ConfigOption = None) -> None:
    """Stop serving a paired user: their schedules, open turns and approvals end with it."""
    cfg = config_or_exit(config)
    conn = create_database(cfg)
    try:
        with transaction(conn):
            done = revoke(conn, user_id, time.time())
    finally:
        conn.close()
    if not done.removed:
        if user_id in cfg.access.allowed_user_ids:
            fail(f"user {user_id} is in access.allowed_user_ids in {cfg.source}; remove it there")
        fail(f"user {user_id} is not a paired user; see `agentd users ls`")
    if json:
        print_json({"removed": user_id, **done.model_dump(exclude={"removed"})})
    else:
        out.print(
            f"User {user_id} is no longer served; cancelled {len(done.schedules)} "
            f"schedule(s) and {len(done.turns)} open turn(s)."
        )
