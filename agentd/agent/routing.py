"""Why a turn did what it did: its routing decision, with a one-line reason.

agentd does not plan a route before the model call: recall runs for every private message of
a user with memories, and the model chooses among the tools it is offered. What the owner
asks ("why did it not look at my documents?") is answered by what the turn was given: whether
recall searched (and for what) or why not, whether search_docs was offered and what it could
reach, which web search there was (the provider's own, the web_search tool, none) and the
tools offered. The decision rides in the `recall` step's journaled result and in the `turn`
audit entry's detail, and is logged once when made.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from agentd.knowledge.tools import doc_scope

if TYPE_CHECKING:
    from agentd.agent.deps import TurnDeps
    from agentd.chat.inputs import TurnInput

log = logging.getLogger("agentd.agent")

RecallState = Literal["searched", "skipped", "failed"]


class RoutingDecision(BaseModel):
    recall: RecallState
    recall_why: str
    documents: bool  # search_docs offered and able to search something here
    documents_why: str
    web: Literal["provider", "tool", "none"]
    tools: list[str]  # every tool offered to the model, by name
    reason: str  # the one line: all of the above, for the audit and the log


def _documents(deps: TurnDeps, inp: TurnInput, tools: list[str]) -> tuple[bool, str]:
    if "search_docs" not in tools:
        return False, "search_docs is not registered (no embedder)"
    scope = doc_scope(deps.config, inp.user_id, inp.private)
    if scope is None:
        return False, "a group chat with docs.in_groups off"
    if scope.library and scope.user_id is not None:
        return True, "the user's documents and the owner's library"
    return True, "the owner's library" if scope.library else "the user's own documents"


def _web(deps: TurnDeps, tools: list[str]) -> Literal["provider", "tool", "none"]:
    if deps.config.web.provider == "anthropic":
        return "provider"
    return "tool" if "web_search" in tools else "none"


def decide(
    deps: TurnDeps, inp: TurnInput, tools: list[str], recall: RecallState, recall_why: str
) -> RoutingDecision:
    """The decision for this turn, given the tools its prompt offers and what recall did."""
    documents, documents_why = _documents(deps, inp, tools)
    web = _web(deps, tools)
    web_words = {
        "provider": "the provider's web search",
        "tool": "the web_search tool",
        "none": "no web search",
    }
    reason = (
        f"recall {recall} ({recall_why}); documents "
        f"{'offered' if documents else 'not offered'} ({documents_why}); "
        f"{web_words[web]}; {len(tools)} tools offered"
    )
    decision = RoutingDecision(
        recall=recall,
        recall_why=recall_why,
        documents=documents,
        documents_why=documents_why,
        web=web,
        tools=tools,
        reason=reason,
    )
    log.info("route: %s", reason, extra={"chat_id": inp.chat_id, "route": decision.web})
    return decision


def audit_detail(decision: RoutingDecision | None) -> dict[str, Any]:
    """What the `turn` audit entry carries of the decision (nothing for a turn journaled before
    decisions were recorded)."""
    return {} if decision is None else {"route": decision.model_dump()}
