"""Which session retrieved which memory, and the spacing effect the decay job draws from it.

Every retrieval already grows a memory's stability x1.2 (``search.strengthen``). Use spread across sessions is
worth more than use within one thread (the spacing effect), so the reply path records the first retrieval of a
memory in each session here, and the decay job later multiplies stability once more for every session after a
memory's first one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from quinn.clock import iso
from quinn.db import Database
from quinn.memory.store import STABILITY_CAP_H


def record_retrievals(db: Database, session_id: str, memory_ids: Sequence[int], at: datetime) -> None:
    """Note that ``session_id`` retrieved these memories (only the first time per session counts)."""
    if not memory_ids:
        return
    moment = iso(at)
    with db.transaction() as tx:
        tx.executemany(
            "INSERT OR IGNORE INTO memory_retrievals (memory_id, session_id, at) VALUES (?, ?, ?)",
            [(int(mid), session_id, moment) for mid in dict.fromkeys(memory_ids)],
        )


@dataclass(frozen=True)
class SpacingOutcome:
    """What one pass did: retrieval rows taken into account, memories made more stable, stale rows dropped."""

    rows: int
    strengthened: int
    dropped: int


def apply_spacing(db: Database, growth: float, cap_h: float = STABILITY_CAP_H) -> SpacingOutcome:
    """Grow stability x``growth`` for every new session that retrieved a memory after its first one.

    One transaction: the pending rows are claimed first (a write, so a concurrent writer waits), applied, then
    marked counted. A pass killed half way leaves everything pending for the next one; a finished pass is never
    applied twice.
    """
    with db.transaction() as tx:
        tx.execute("UPDATE memory_retrievals SET counted = 2 WHERE counted = 0")
        pending = tx.query(
            "SELECT r.memory_id, count(*),"
            " EXISTS (SELECT 1 FROM memory_retrievals o WHERE o.memory_id = r.memory_id AND o.counted = 1)"
            " FROM memory_retrievals r WHERE r.counted = 2 GROUP BY r.memory_id"
        )
        strengthened = 0
        rows = 0
        for memory_id, new_sessions, seen_before in pending:
            rows += int(new_sessions)
            spaced = int(new_sessions) if seen_before else int(new_sessions) - 1
            if spaced <= 0:
                continue
            tx.execute(
                "UPDATE memories SET stability = min(stability * ?, ?) WHERE id = ?",
                (float(growth) ** spaced, float(cap_h), int(memory_id)),
            )
            strengthened += 1
        tx.execute("UPDATE memory_retrievals SET counted = 1 WHERE counted = 2")
        dropped = int(
            tx.query("SELECT count(*) FROM memory_retrievals WHERE memory_id NOT IN (SELECT id FROM memories)")[0][0]
        )
        if dropped:
            tx.execute("DELETE FROM memory_retrievals WHERE memory_id NOT IN (SELECT id FROM memories)")
    return SpacingOutcome(rows, strengthened, dropped)
