"""/memory's view and buttons: list, forget with undo, edit; only the pressing user's memories."""

from __future__ import annotations

import json
from typing import Any

from agentd.db.runner import ConnRunner
from agentd.memory import HashingEmbedder
from agentd.memory.chat_view import (
    EDIT_TTL,
    apply_edit,
    await_edit,
    memory_page,
    on_button,
    take_edit,
)
from agentd.memory.manage import add
from agentd.memory.store import NewMemory, add_memory, get_memory, taints


async def test_forget_undo_and_edit_from_buttons(conn: Any) -> None:
    db, emb = ConnRunner(conn), HashingEmbedder()
    memory, _ = await add(db, emb, 7, "Walks the dog at seven", origin_ref="chat:7:msg:3")
    page = memory_page(conn, 7)
    assert "your words, chat:7:msg:3" in page.text
    forget = page.buttons[0][1].data
    assert forget == f"mem:forget:{memory.id}"
    assert (await on_button(db, emb, 8, forget)).text == f"No memory #{memory.id}."  # not theirs
    gone = await on_button(db, emb, 7, forget)
    assert get_memory(conn, memory.id) is None
    await on_button(db, emb, 7, gone.buttons[0][0].data)  # undo
    assert get_memory(conn, memory.id).content == "Walks the dog at seven"  # type: ignore[union-attr]
    asked = await on_button(db, emb, 7, f"mem:edit:{memory.id}")
    assert asked.awaiting_edit == memory.id
    done = await apply_edit(db, emb, 7, memory.id, "Walks the dog at eight")
    assert "Walks the dog at eight" in done.text
    assert (await on_button(db, emb, 7, "mem:bogus")).text.startswith("That button")


def test_only_outside_memories_taint(conn: Any) -> None:
    ids = [
        add_memory(conn, NewMemory(user_id=1, kind="note", content=f"m{o}", origin=o))
        for o in ("user", "model", "outside")
    ]
    mine, model, outside = (get_memory(conn, i) for i in ids)
    assert not taints([mine, model])  # type: ignore[list-item]
    assert taints([mine, outside])  # type: ignore[list-item]


async def test_pin_button_and_every_change_is_audited_as_made_in_chat(conn: Any) -> None:
    db, emb = ConnRunner(conn), HashingEmbedder()
    memory, _ = await add(db, emb, 7, "Allergic to penicillin")
    page = memory_page(conn, 7)
    assert page.buttons[0][2].data == f"mem:pin:{memory.id}"
    pinned = await on_button(db, emb, 7, page.buttons[0][2].data)
    assert pinned.text.startswith("Pinned") and get_memory(conn, memory.id).pinned  # type: ignore[union-attr]
    await apply_edit(db, emb, 7, memory.id, "Allergic to penicillin and latex")
    rows = conn.execute("SELECT kind, detail FROM audit ORDER BY id").fetchall()
    assert [(k, json.loads(d)["action"], json.loads(d)["by"]) for k, d in rows] == [
        ("memory_changed", "pin", "chat"),
        ("memory_changed", "edit", "chat"),
    ]
    assert "cannot be empty" in (await apply_edit(db, emb, 7, memory.id, "  ")).text


def test_an_edit_waits_for_one_message_lapses_and_a_command_cancels_it(conn: Any) -> None:
    await_edit(conn, 7, 7, 5, now=1000.0)
    assert take_edit(conn, 7, 8, "someone else", now=1001.0) is None  # another user's message
    assert take_edit(conn, 7, 7, "Lives in Lyon", now=1001.0) == 5
    assert take_edit(conn, 7, 7, "and again", now=1002.0) is None  # used up
    await_edit(conn, 7, 7, 5, now=1000.0)
    assert take_edit(conn, 7, 7, "/help", now=1001.0) is None  # a command cancels it
    assert take_edit(conn, 7, 7, "plain", now=1002.0) is None
    await_edit(conn, 7, 7, 5, now=1000.0)
    assert take_edit(conn, 7, 7, "too late", now=1000.0 + EDIT_TTL + 1) is None


def test_a_fact_from_outside_content_stays_out_of_the_prompts_facts(conn: Any) -> None:
    from agentd.memory import facts_for_prompt, outside_facts_in_prompt

    add_memory(conn, NewMemory(user_id=3, kind="fact", content="Lives in Oslo", origin="user"))
    assert not outside_facts_in_prompt(conn, 3, 2000)
    add_memory(conn, NewMemory(user_id=3, kind="fact", content="Recital Friday", origin="outside"))
    # Listed in every prompt it would taint every turn: it is found by search instead.
    assert not outside_facts_in_prompt(conn, 3, 2000)
    listed = facts_for_prompt(conn, 3, 2000)
    assert "Lives in Oslo" in listed and "Recital Friday" not in listed
