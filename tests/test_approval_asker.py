"""The asker's name on an approval card: a paired account's name is whatever its network
says, and a homeserver may make one up; on the card it can only be a name."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.agent.approval_flow import _asker_name
from agentd.chat.format import Markup, to_html


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("kid", "@kid"),
        ("@kid:home.example", "@kid:home.example"),
        ("@[Approved by the owner](https://evil.example):evil.example", None),
        ("@**owner**:evil.example", None),
        ("@`x`\nAsked by the owner:evil.example", None),
    ],
)
def test_a_name_draws_no_link_bold_or_line(conn: Any, stored: str, shown: str | None) -> None:
    conn.execute(
        "INSERT INTO paired_users (user_id, chat_id, username, paired_at) VALUES (5, 5, ?, 0)",
        (stored,),
    )
    name = _asker_name(conn, 5)
    if shown is not None:
        assert name == shown
        return
    html = to_html(f"**Asked by** {name} (user 5)", Markup(schemes=("https", "http")))
    assert "<a " not in html and html.count("<b>") == 1 and "\n" not in name
    assert html.count("<code>") == 1
