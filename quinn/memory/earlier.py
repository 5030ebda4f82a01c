"""The version a current memory replaced (issue 32): recall shows it as "earlier: X (until DATE)", so a question
about the past has its answer and the old value is never mistaken for the current one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from quinn.db import Database
from quinn.memory.models import MEMORY_COLUMNS, Memory
from quinn.memory.rows import INSERT_CHUNK, marks


def earlier_versions(db: Database, memories: Sequence[Memory]) -> dict[int, Memory]:
    """For each of ``memories`` that is a later version of itself (an update, not a consolidation of several),
    the version it replaced, by the later version's id. One earlier version each: the one right before. Forgotten
    rows are left out."""
    later = {m.id: m for m in memories if m.version > 1}
    ids = list(later)
    found: dict[int, Memory] = {}
    for start in range(0, len(ids), INSERT_CHUNK):
        chunk = ids[start : start + INSERT_CHUNK]
        roots = sorted({later[mid].root_id for mid in chunk})
        # By root_id first: it is indexed (memories_root), superseded_by is not.
        rows = db.query(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE root_id IN ({marks(roots)})"
            f" AND superseded_by IN ({marks(chunk)}) AND active = 1",
            [*roots, *chunk],
        )
        for old in map(Memory.from_row, rows):
            new = later[int(old.superseded_by or 0)]
            if old.root_id == new.root_id and old.user_id == new.user_id and old.version == new.version - 1:
                found[new.id] = old
    return found


def retire_earlier(db: Database, user_id: str, mentions: Callable[[str], bool]) -> int:
    """A forget reaches the earlier values too: replaced versions of ``user_id``'s memories whose text
    ``mentions`` the fact are made inactive (kept in history, out of every read), so "earlier: X" never brings a
    forgotten value back. Returns how many."""
    rows = db.query(
        "SELECT id, content FROM memories WHERE user_id = ? AND superseded_by IS NOT NULL AND active = 1", [user_id]
    )
    ids = [int(row[0]) for row in rows if mentions(str(row[1]))]
    for start in range(0, len(ids), INSERT_CHUNK):
        chunk = ids[start : start + INSERT_CHUNK]
        db.execute(f"UPDATE memories SET active = 0 WHERE id IN ({marks(chunk)})", chunk)
    return len(ids)
