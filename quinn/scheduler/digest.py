"""Job 8, digest: plan "here is what I learnt about you" for each user due one (``agent/digest.py``).

Only the plan is made here (a ``digests`` row per user: which memories, in which order); the daemon composes and
sends the mail after its next folder pass, with the mail settings the job does not have. Off unless
``[scheduler] digest_every_days`` is set.
"""

from __future__ import annotations

import logging

from quinn.agent import digest
from quinn.scheduler.context import JobContext

log = logging.getLogger(__name__)


async def digest_job(ctx: JobContext) -> None:
    """Plan the digests that are due; counts them as ``created``."""
    settings = ctx.settings
    planned = await ctx.db(digest.plan, ctx.store.db, settings.digest_every_days, settings.digest_max_items, ctx.now())
    ctx.counts.created += len(planned)
    if planned:
        log.info("digest: %d planned", len(planned))
