"""Per-turn lookups use the partial indexes made for them (m020), not a walk of the chat's past.

SQLite uses a partial index only when the query repeats its condition, so a reworded query
would silently scan again; these pin the plans of the statements the functions really run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentd.access import ratelimit
from agentd.config import LimitsConfig
from agentd.durable import store
from agentd.memory.summarise import summary_due, summary_running


def plans(conn: Any, call: Callable[[Any], object]) -> list[str]:
    """The query plan of every statement `call(conn)` runs."""
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        call(conn)
    finally:
        conn.set_trace_callback(None)
    return [
        " / ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
        for sql in statements
    ]


@pytest.mark.parametrize(
    "call, index",
    [
        (lambda c: store.next_open_for_key(c, "chat-1"), "workflow_instances_open_key"),
        (lambda c: store.open_keys(c), "workflow_instances_open_key"),
        (lambda c: summary_running(c, 1), "workflow_instances_open_key"),
        (lambda c: summary_due(c, 1, 0, 0), "messages_unsummarised"),
        (
            lambda c: ratelimit.check(
                c,
                LimitsConfig(daily_tokens=0, daily_tokens_total=0),
                user_id=1,
                instance_id="t",
                now=1e9,
            ),
            "messages_user_recent",
        ),
    ],
)
def test_the_lookup_uses_its_partial_index(conn: Any, call: Any, index: str) -> None:
    found = plans(conn, call)
    assert found and all(index in plan for plan in found), found


def test_the_token_budgets_read_a_day_by_index_not_the_whole_ledger(conn: Any) -> None:
    limits = LimitsConfig(messages_per_minute=0)  # the default budgets: per user and in total
    found = plans(conn, lambda c: ratelimit.check(c, limits, user_id=1, instance_id="t", now=1e9))
    assert len(found) == 2, found
    assert all("USING INDEX" in plan and "SCAN llm_usage" not in plan for plan in found), found
