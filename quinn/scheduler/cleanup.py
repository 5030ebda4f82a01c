"""Job 5, cleanup: archive (never delete) memories by the seed rules; then the retention windows
(``scheduler/retention.py``, ``[retention]``), which do delete, each kind after the time the operator chose.

- importance below ``cleanup_min_importance`` and not retrieved for ``cleanup_unused_days``;
- type ``context`` older than ``cleanup_context_days``;
- past ``expires_at``.

Archived memories leave retrieval (inactive) and stay in history with the rule that archived them. Immutable
memories and global (persona) memories are never archived: only an operator changes those. Each memory is
archived in its own transaction, so a run killed half way leaves the rest for the next run.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from quinn.clock import iso
from quinn.config import SchedulerConfig
from quinn.errors import StoreError
from quinn.memory import AGE_ANCHOR, CURRENT, MemoryStore
from quinn.scheduler.context import JobContext
from quinn.scheduler.retention import expire

log = logging.getLogger(__name__)

_CURRENT = f"user_id IS NOT NULL AND {CURRENT} AND immutable = 0"


def archive_candidates(store: MemoryStore, settings: SchedulerConfig, now: datetime) -> list[tuple[int, str, str]]:
    """(memory id, user id, rule) for every memory a rule archives, oldest first; one rule named per memory."""
    unused_since = iso(now - timedelta(days=settings.cleanup_unused_days))
    context_before = iso(now - timedelta(days=settings.cleanup_context_days))
    rows = store.db.query(
        "SELECT id, user_id, CASE"
        "  WHEN expires_at IS NOT NULL AND expires_at <= ? THEN 'expired'"
        "  WHEN type = 'context' AND valid_from < ? THEN 'context older than ' || ? || ' days'"
        "  ELSE 'importance below ' || ? || ', unused for ' || ? || ' days' END"
        f" FROM memories WHERE {_CURRENT} AND ("
        "  (expires_at IS NOT NULL AND expires_at <= ?)"
        "  OR (type = 'context' AND valid_from < ?)"
        f"  OR (importance < ? AND {AGE_ANCHOR} < ?)"
        ") ORDER BY id",
        (iso(now), context_before, _num(settings.cleanup_context_days), _num(settings.cleanup_min_importance),
         _num(settings.cleanup_unused_days), iso(now), context_before, settings.cleanup_min_importance,
         unused_since),
    )  # fmt: skip
    return [(int(mid), user, rule) for mid, user, rule in rows]


def archive(store: MemoryStore, memory_id: int, user_id: str, rule: str) -> bool:
    """Take one memory out of retrieval, keeping it in history with the rule; False if it changed meanwhile."""
    try:
        store.forget(memory_id, user_id=user_id, reason=f"archived by cleanup: {rule}")
    except StoreError as exc:
        log.info("cleanup: memory %s not archived: %s", memory_id, exc)
        return False
    return True


async def cleanup_job(ctx: JobContext) -> None:
    """Archive every memory the rules name, then apply the retention windows (``[retention]``)."""
    candidates = await ctx.db(archive_candidates, ctx.store, ctx.settings, ctx.now())
    for memory_id, user_id, rule in candidates:
        ctx.counts.processed += 1
        if await ctx.db(archive, ctx.store, memory_id, user_id, rule):
            ctx.counts.archived += 1
            rules = ctx.counts.details.setdefault("rules", {})
            key = rule.split(" ", 1)[0]
            rules[key] = rules.get(key, 0) + 1
        else:
            ctx.counts.skipped += 1
    expired = await ctx.db(expire, ctx.store.db, ctx.retention, ctx.now())
    if any(expired.values()):
        ctx.counts.details["retention"] = expired


def _num(value: float) -> str:
    return f"{value:g}"
