"""Whether a user lets Quinn remember them: "stop remembering me" and "you may remember me again" by mail.

An opted-out user is still answered, with what Quinn already knows of them (they may ask it to forget that, or to
delete everything), but nothing new is stored: no extraction, no memory saved or changed by the model's tools or
by "remember …", no review of their conversations by the session-close job, no thread summary (the summarize
job, "summarize this and remember it"), no reflection, graph or consolidation. Each reply says so. The wish is kept
through a purge (the row is a preference, not memory).

This module owns the ``memory_consent`` table (migration 0010). Its functions run on the DB thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from quinn.clock import iso
from quinn.db import Database

FOOTER = ('\n\n---\nAs you asked, I am not remembering anything new from our emails. Write "you may remember me '
          'again" to change that.')  # fmt: skip


def opted_out(db: Database, user_id: str) -> bool:
    """Whether ``user_id`` asked Quinn to stop remembering them (and has not taken it back)."""
    return db.query_value("SELECT 1 FROM memory_consent WHERE user_id = ?", (user_id,)) is not None


def opted_out_among(db: Database, users: Sequence[str]) -> set[str]:
    """Which of ``users`` opted out, in one query (the console's People page)."""
    if not users:
        return set()
    marks = ", ".join("?" * len(users))
    return {row[0] for row in db.query(f"SELECT user_id FROM memory_consent WHERE user_id IN ({marks})", list(users))}


def opt_out(db: Database, user_id: str, now: datetime, message_id: str | None) -> None:
    """Record the wish (idempotent: the first mail that asked is kept)."""
    db.execute("INSERT OR IGNORE INTO memory_consent (user_id, opted_out_at, message_id) VALUES (?, ?, ?)",
               (user_id, iso(now), message_id))  # fmt: skip


def opt_in(db: Database, user_id: str) -> bool:
    """Take the wish back; returns whether there was one."""
    with db.transaction() as tx:
        found = tx.query("SELECT 1 FROM memory_consent WHERE user_id = ?", (user_id,))
        tx.execute("DELETE FROM memory_consent WHERE user_id = ?", (user_id,))
    return bool(found)
