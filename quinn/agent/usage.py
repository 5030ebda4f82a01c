"""Token usage: what each call chain cost, recorded per user, per email and per job so cost is visible.

Money is tokens times the prices the operator configured (``[llm] price_*_per_mtok``, per model): never a
guessed price. Tokens of a model without a price are counted apart (``Spend.unpriced_tokens``), not priced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from quinn.agent.llm import Usage
from quinn.clock import iso, utcnow
from quinn.config import LlmConfig
from quinn.db import Database, Transaction

PER_PRICE = 1_000_000  # prices are per million tokens


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


@dataclass(frozen=True)
class Price:
    """What a million tokens of one model cost, in the currency of the operator's bill."""

    input_per_mtok: float
    output_per_mtok: float

    def of(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of these tokens."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / PER_PRICE


def prices_from(config: LlmConfig) -> dict[str, Price]:
    """The configured prices by model id (``llm_usage.model``): ``model``'s, and ``background_model``'s when it
    has its own; empty when none is set."""
    prices = {}
    if config.price_input_per_mtok is not None and config.price_output_per_mtok is not None:
        prices[config.model] = Price(config.price_input_per_mtok, config.price_output_per_mtok)
    background = config.background_model  # another model whenever it has prices (LlmConfig checks)
    small_in, small_out = config.background_price_input_per_mtok, config.background_price_output_per_mtok
    if background and small_in is not None and small_out is not None:
        prices[background] = Price(small_in, small_out)
    return prices


@dataclass(frozen=True)
class Spend:
    """Tokens of a period and what they cost; ``cost`` is None when no price is configured at all."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cost: float | None = None
    unpriced_tokens: int = 0  # tokens of models without a configured price: not in ``cost``

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens


def spend_of(totals: Iterable[UsageTotal], prices: Mapping[str, Price]) -> Spend:
    """Sum ``totals`` (each of one model) and price them with ``prices``."""
    i = o = c = unpriced = 0
    cost = 0.0
    for total in totals:
        i, o, c = i + total.input_tokens, o + total.output_tokens, c + total.calls
        price = prices.get(total.model)
        if price is None:
            unpriced += total.input_tokens + total.output_tokens
        else:
            cost += price.of(total.input_tokens, total.output_tokens)
    return Spend(i, o, c, cost if prices else None, unpriced if prices else 0)


def month_start(now: datetime) -> datetime:
    """The first moment of ``now``'s calendar month (UTC)."""
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def users_spend(db: Database, users: Sequence[str], since: datetime, prices: Mapping[str, Price]) -> dict[str, Spend]:
    """What each of ``users`` spent since ``since`` (one query for all of them); a user without usage is absent."""
    if not users:
        return {}
    marks = ", ".join("?" * len(users))
    rows = db.query(
        "SELECT user_id, model, sum(input_tokens), sum(output_tokens), sum(calls) FROM llm_usage"
        f" WHERE user_id IN ({marks}) AND at >= ? GROUP BY user_id, model",
        (*users, iso(since)),
    )
    by_user: dict[str, list[UsageTotal]] = {}
    for user, model, i, o, c in rows:
        by_user.setdefault(user, []).append(UsageTotal(user, int(i or 0), int(o or 0), int(c or 0), model))
    return {user: spend_of(totals, prices) for user, totals in by_user.items()}
