"""Counts of memories by scope, and the changes of the always-present profile (the "core") over time.

Read by the ``quinn_memories`` metric and by the console's memory-health figures (core stability), so both
count a current memory by the one rule (``filters.CURRENT``).
"""

from __future__ import annotations

from datetime import datetime

from quinn.clock import iso
from quinn.db import Database
from quinn.memory.filters import CURRENT

#: Changes that end what a profile memory said: replaced (by an edit or a newer fact), forgotten or archived; an
#: edit writes "updated" on the new version and "superseded" on the old one, counted once by the latter.
ENDING_CHANGES = ("superseded", "forgotten", "archived")


def current_by_scope(db: Database) -> dict[str, int]:
    """Current memories per scope (profile, episodic, domain, semantic, global ...)."""
    return {scope: int(n) for scope, n in db.query(f"SELECT scope, count(*) FROM memories WHERE {CURRENT} GROUP BY 1")}


def profile_changes_by_day(db: Database, since: datetime) -> dict[str, int]:
    """Per UTC day since ``since``: how many times a profile memory was changed, replaced or forgotten."""
    marks = ", ".join("?" * len(ENDING_CHANGES))
    rows = db.query(
        "SELECT substr(v.changed_at, 1, 10), count(*) FROM memory_versions v JOIN memories m ON m.id = v.memory_id"
        f" WHERE v.changed_at >= ? AND v.change IN ({marks}) AND m.scope = 'profile' GROUP BY 1",
        (iso(since), *ENDING_CHANGES),
    )
    return {day: int(n) for day, n in rows}
