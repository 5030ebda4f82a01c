"""Retention windows (``[retention]``): old records of each kind leave the database, run by the cleanup job.

* conversations: stored mail text (``messages``, both directions) and conversation reviews older than the window
  are deleted; threads quiet that long lose their rolling summary text. Sessions stay (ids and state, no text):
  a late reply still joins its thread. What was learnt from the mail (memories) is not touched.
* outbox: the raw copy of a sent or drafted reply is blanked once the window has passed since it went out; the
  row (state, template version) stays for the statistics. Pending and failed ones are never touched: they still
  have to be sent or looked at.
* usage: token usage rows.
* reply traces: what reached each reply's prompt (ids and scores), by when the reply was written.
* archived: memories no longer in use (archived, forgotten, or an old version of a changed memory) are deleted
  with their history rows and graph links; a current memory is never touched.

A window of 0 keeps that kind for good. Full-text indexes are merged afterwards so deleted text leaves the file.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from quinn.agent import reply_trace, state, usage
from quinn.clock import iso
from quinn.config import RetentionConfig
from quinn.db import Database, Transaction
from quinn.mailbox import outbox, threads
from quinn.memory import expiry

Expire = Callable[[Transaction, str], dict[str, int]]

#: Each window of ``[retention]`` and the owners whose ``expire_before(tx, before)`` it runs (as
#: ``agent.purge.OWNERS`` does for a user): every table's rows are deleted by the module that owns the table.
WINDOWS: tuple[tuple[str, tuple[Expire, ...]], ...] = (
    ("conversations_days", (threads.expire_before, state.expire_before)),
    ("outbox_days", (outbox.expire_before,)),
    ("usage_days", (usage.expire_before,)),
    ("reply_traces_days", (reply_trace.expire_before,)),
    ("archived_days", (expiry.expire_before,)),
)


def expire(db: Database, retention: RetentionConfig, now: datetime) -> dict[str, int]:
    """Apply every window in one transaction; returns the rows deleted or blanked per kind (kinds whose window is
    0 are absent)."""
    done: dict[str, int] = {}
    with db.transaction() as tx:
        for setting, owners in WINDOWS:
            days = getattr(retention, setting)
            if not days:
                continue
            before = iso(now - timedelta(days=days))
            for owner in owners:
                done |= owner(tx, before)
    if done.get("messages") or done.get("memories"):
        db.merge_text_indexes()
    return done
