"""Token usage: what each call chain cost, recorded per user, per email and per job so cost is visible."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from quinn.agent.llm import Usage
from quinn.clock import iso, utcnow
from quinn.db import Database, Transaction


@dataclass(frozen=True)
class UsageTotal:
    """Summed usage of one group (a user, a purpose, a model)."""

    key: str | None
    input_tokens: int
    output_tokens: int
    calls: int
    model: str = ""  # for one mail's usage (``message_usage``): the model that answered


def record_usage(
    db: Database, purpose: str, usage: Usage, *, user_id: str | None = None, message_id: str | None = None,
    at: datetime | None = None,
) -> None:  # fmt: skip
    """Write one row to ``llm_usage``, the only place that does. ``purpose`` is ``reply``, ``extract``,
    ``digest``, ``job:<name>``, …; ``at`` (default now) is a job's clock."""
    db.execute(
        "INSERT INTO llm_usage (at, model, purpose, user_id, message_id, input_tokens, output_tokens, calls)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (iso(at or utcnow()), usage.model, purpose, user_id, message_id, usage.input_tokens, usage.output_tokens,
         usage.calls),
    )  # fmt: skip


def usage_totals(db: Database, by: str = "user_id") -> list[UsageTotal]:
    """Usage summed by ``user_id``, ``purpose``, ``model`` or ``message_id``, largest first."""
    if by not in ("user_id", "purpose", "model", "message_id"):
        raise ValueError(f"cannot group usage by {by!r}")
    rows = db.query(
        f"SELECT {by}, sum(input_tokens), sum(output_tokens), sum(calls) FROM llm_usage GROUP BY {by}"
        " ORDER BY sum(input_tokens) + sum(output_tokens) DESC"
    )
    return [UsageTotal(key, int(i or 0), int(o or 0), int(c or 0)) for key, i, o, c in rows]


def expire_before(tx: Transaction, before: str) -> dict[str, int]:
    """Retention (``[retention] usage_days``): token usage rows recorded before ``before``."""
    return {"llm_usage": tx.delete("llm_usage", "at < ?", (before,))}


def message_usage(db: Database, message_id: str) -> list[UsageTotal]:
    """What the call chains of one mail cost, by purpose (the reply, its extraction), in the order first made."""
    rows = db.query(
        "SELECT purpose, sum(input_tokens), sum(output_tokens), sum(calls), min(model) FROM llm_usage"
        " WHERE message_id = ? GROUP BY purpose ORDER BY min(id)",
        (message_id,),
    )
    return [UsageTotal(purpose, int(i or 0), int(o or 0), int(c or 0), model) for purpose, i, o, c, model in rows]


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The user's token usage rows, in a purge."""
    return {"llm_usage": tx.delete("llm_usage", "user_id = ?", (user,))}
