"""Retention windows (``[retention]``): old records of each kind leave the database, run by the cleanup job.

* conversations: stored mail text (``messages``, both directions) and conversation reviews older than the window
  are deleted; threads quiet that long lose their rolling summary text. Sessions stay (ids and state, no text):
  a late reply still joins its thread. What was learnt from the mail (memories) is not touched.
* outbox: the raw copy of a sent or drafted reply is blanked once the window has passed since it went out; the
  row (state, template version) stays for the statistics. Pending and failed ones are never touched: they still
  have to be sent or looked at.
* usage: token usage rows.
* archived: memories no longer in use (archived, forgotten, or an old version of a changed memory) are deleted
  with their history rows and graph links; a current memory is never touched.

A window of 0 keeps that kind for good. Full-text indexes are merged afterwards so deleted text leaves the file.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from quinn.clock import iso
from quinn.config import RetentionConfig
from quinn.db import Database
from quinn.memory import NOT_CURRENT

_GONE = f"({NOT_CURRENT})"


def expire(db: Database, retention: RetentionConfig, now: datetime) -> dict[str, int]:
    """Apply every window; returns the rows deleted or blanked per kind (kinds whose window is 0 are absent)."""

    def before(days: float) -> str:
        return iso(now - timedelta(days=days))

    done: dict[str, int] = {}
    with db.transaction() as tx:

        def apply(kind: str, count_sql: str, change_sql: str, params: tuple[str, ...]) -> None:
            done[kind] = done.get(kind, 0) + int(tx.query(count_sql, params)[0][0])
            tx.execute(change_sql, params)

        if retention.conversations_days:
            cut = (before(retention.conversations_days),)
            apply("messages", "SELECT count(*) FROM messages WHERE sent_at < ?",
                  "DELETE FROM messages WHERE sent_at < ?", cut)  # fmt: skip
            apply("conversation_summaries", "SELECT count(*) FROM conversation_summaries WHERE created_at < ?",
                  "DELETE FROM conversation_summaries WHERE created_at < ?", cut)  # fmt: skip
            apply("session_summaries",
                  "SELECT count(*) FROM sessions WHERE last_message_at < ? AND coalesce(summary, '') != ''",
                  "UPDATE sessions SET summary = NULL WHERE last_message_at < ? AND coalesce(summary, '') != ''",
                  cut)  # fmt: skip
        if retention.outbox_days:
            apply("outbox_raw",
                  "SELECT count(*) FROM outbox WHERE state IN ('sent', 'drafted') AND sent_at < ? AND length(raw) > 0",
                  "UPDATE outbox SET raw = X'' WHERE state IN ('sent', 'drafted') AND sent_at < ? AND length(raw) > 0",
                  (before(retention.outbox_days),))  # fmt: skip
        if retention.usage_days:
            apply("llm_usage", "SELECT count(*) FROM llm_usage WHERE at < ?", "DELETE FROM llm_usage WHERE at < ?",
                  (before(retention.usage_days),))  # fmt: skip
        if retention.archived_days:
            cut = (before(retention.archived_days),)
            gone = f"SELECT id FROM memories WHERE {_GONE} AND coalesce(valid_to, updated_at) < ?"
            for table, column in (("memory_versions", "memory_id"), ("memory_retrievals", "memory_id"),
                                  ("relationships", "memory_id")):  # fmt: skip
                tx.execute(f"DELETE FROM {table} WHERE {column} IN ({gone})", cut)
            apply("memories", f"SELECT count(*) FROM ({gone})", f"DELETE FROM memories WHERE id IN ({gone})", cut)
    if done.get("messages") or done.get("memories"):
        db.executescript(
            "INSERT INTO memories_fts (memories_fts) VALUES ('optimize');"
            "INSERT INTO messages_fts (messages_fts) VALUES ('optimize');"
        )
    return {kind: count for kind, count in done.items()}
