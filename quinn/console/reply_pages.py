"""The console's "Why did Quinn say that?" page: one reply's prompt version, the memories, passages and files
that reached its prompt with their scores and citations, the tool calls the model made, and its tokens.

The trace (``agent/reply_trace.py``) holds ids and scores, not text: the memories are read through the store and
the passages through ``memory.passages`` by id, so a memory forgotten since shows as forgotten and a purged
person's replies are gone. Tokens come from the token ledger (``agent/usage.py``) by the mail's Message-ID, and
their cost from the prices in ``[llm]`` (none configured: "—").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from quinn.agent import ShownMemory, ShownPassage, Traced, reply_trace, usage
from quinn.console.app import Console, Endpoint
from quinn.memory import Memory, Passage, passages_by_id


@dataclass(frozen=True)
class MemoryRow:
    """A memory that reached the prompt, with what it says now (None: it is gone)."""

    shown: ShownMemory
    memory: Memory | None


@dataclass(frozen=True)
class PassageRow:
    """A passage that reached the prompt, with its text and citation now (None: it is gone)."""

    shown: ShownPassage
    passage: Passage | None


def _why(console: Console, trace_id: int) -> dict[str, Any] | None:
    """Everything the page shows (runs on the DB thread)."""
    store = console.store
    traced: Traced | None = reply_trace.by_id(store.db, trace_id)
    if traced is None:
        return None
    trace = traced.trace
    memories = [MemoryRow(m, store.get(m.id, user_id=traced.user_id)) for m in trace.memories]
    # Other users' passages never reach a prompt, but the knowledge base's do (its owner is not the person).
    found = passages_by_id(store.db, [p.id for p in trace.passages])
    passages = [PassageRow(p, found.get(p.id)) for p in trace.passages]
    ledger = console.ledger.listing(message_id=traced.message_id, limit=1)
    spent = usage.message_usage(store.db, traced.message_id)
    costs = [usage.spend_of([part], console.prices) for part in spent]  # each part is of one model
    return {"traced": traced, "trace": trace, "memories": memories, "passages": passages,
            "usage": list(zip(spent, costs, strict=True)), "total": usage.spend_of(spent, console.prices),
            "priced": bool(console.prices), "mail": ledger[0] if ledger else None}  # fmt: skip


def why(console: Console) -> Endpoint:
    """GET /replies/{trace_id}: why Quinn said what it said in one reply."""

    async def show_why(request: Request) -> Response:
        trace_id = request.path_params["trace_id"]
        values = await console.store.db.run(_why, console, trace_id)
        if values is None:
            return console.render(request, "error.html", 404, message=f"There is no reply {trace_id} on record.")
        return console.render(request, "why.html", **values)

    return show_why
