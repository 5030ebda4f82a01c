"""Memory's part of retention (``[retention] archived_days``, run by scheduler/retention.py): memories out of use
(archived, forgotten, or an old version of a changed memory) since before the window are deleted with their
history rows, retrieval records and graph links. A current memory is never touched (``filters.NOT_CURRENT``)."""

from __future__ import annotations

from quinn.db import Transaction
from quinn.memory.filters import NOT_CURRENT


def expire_before(tx: Transaction, before: str) -> dict[str, int]:
    """Delete the memories out of use since before ``before``; returns how many."""
    gone = f"SELECT id FROM memories WHERE ({NOT_CURRENT}) AND coalesce(valid_to, updated_at) < ?"
    for table in ("memory_versions", "memory_retrievals", "relationships"):  # what points at them goes first
        tx.execute(f"DELETE FROM {table} WHERE memory_id IN ({gone})", (before,))
    return {"memories": tx.delete("memories", f"id IN ({gone})", (before,))}
