"""Job 4, decay: memories fade unless used, and use spread over sessions makes them last.

Effective importance is ``importance x exp(-hours since last access / stability)``, computed at retrieval time
(``memory.search.effective_importance``), and every retrieval grows stability x1.2 up to a cap
(``memory.search.strengthen``). What retrieval alone cannot see is *spacing*: the reply path records the first
retrieval of a memory in each session (``memory_retrievals``), and this job multiplies stability by
``spaced_growth`` once for every further session that used the memory, so a fact needed across many threads
outlives one needed many times within one. Applied in one transaction, marked as counted in it: a run killed
half way is redone, a finished one never applied twice.
"""

from __future__ import annotations

import math
from datetime import datetime

from quinn.clock import iso
from quinn.memory import AGE_ANCHOR, CURRENT, MemoryStore, apply_spacing
from quinn.scheduler.context import JobContext

FADED_SHARE = 0.1  # "faded": effective importance under a tenth of the importance


def count_faded(store: MemoryStore, now: datetime) -> int:
    """Current memories whose effective importance fell under ``FADED_SHARE`` of their importance."""
    # exp(-h/s) < share  <=>  h > s * ln(1/share): no exp() needed in SQL.
    value = store.db.query_value(
        f"SELECT count(*) FROM memories WHERE {CURRENT}"
        f" AND (julianday(?) - julianday({AGE_ANCHOR})) * 24.0 > max(stability, 1.0) * ?",
        (iso(now), math.log(1 / FADED_SHARE)),
    )
    return int(value or 0)


async def decay_job(ctx: JobContext) -> None:
    """Apply the spacing effect to stability and report how many memories have faded."""
    outcome = await ctx.db(apply_spacing, ctx.store.db, ctx.settings.spaced_growth)
    ctx.counts.processed = outcome.rows
    ctx.counts.updated = outcome.strengthened
    if outcome.dropped:
        ctx.counts.details["retrievals_dropped"] = outcome.dropped
    ctx.counts.details["faded"] = await ctx.db(count_faded, ctx.store, ctx.now())
