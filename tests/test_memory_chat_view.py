"""/memory's view and buttons: list, forget with undo, edit; only the pressing user's memories."""

from __future__ import annotations

from typing import Any

from agentd.db.runner import ConnRunner
from agentd.memory import HashingEmbedder
from agentd.memory.chat_view import apply_edit, memory_page, on_button
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
