"""Reply traces leave with the rest: retention deletes those older than ``[retention] reply_traces_days`` and a
purge leaves no row of the person (a real libSQL file; the retention module the cleanup job runs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from quinn.agent import reply_trace
from quinn.agent.purge import purge
from quinn.agent.reply_trace import ShownMemory, Trace
from quinn.config import RetentionConfig
from quinn.db import Database
from quinn.memory.store import MemoryStore
from quinn.scheduler.retention import expire

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
ALICE, BOB = "alice@example.org", "bob@example.org"


def traced_store(tmp_path: Path) -> MemoryStore:
    """Alice and Bob each with a reply of 40 days ago and one of a day ago (and a memory each)."""
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), None)
    for user in (ALICE, BOB):
        memory = store.add(user, f"{user} likes tea", type="preference")
        trace = Trace(memories=(ShownMemory(memory, "profile"),))
        for days, name in ((40, "old"), (1, "new")):
            reply_trace.record(store.db, user, f"<{name}-{user}>", "reply", "reply@t", trace, NOW - timedelta(days))
    return store


def traces(store: MemoryStore) -> list[tuple[str, str]]:
    return [(u, m) for u, m in store.db.query("SELECT user_id, message_id FROM reply_traces ORDER BY user_id, id")]


def test_retention_deletes_traces_older_than_the_window(tmp_path):
    store = traced_store(tmp_path)
    try:
        assert "reply_traces" not in expire(store.db, RetentionConfig(), NOW)  # 0, the default: kept for good
        assert len(traces(store)) == 4
        assert expire(store.db, RetentionConfig(reply_traces_days=30), NOW)["reply_traces"] == 2
        assert traces(store) == [(ALICE, f"<new-{ALICE}>"), (BOB, f"<new-{BOB}>")]
        # The window is by the reply's time: a day-old trace goes once the window is under a day.
        assert expire(store.db, RetentionConfig(reply_traces_days=0.5), NOW)["reply_traces"] == 2
        assert traces(store) == []
    finally:
        store.close()


def test_a_purge_leaves_no_trace_of_the_person(tmp_path):
    store = traced_store(tmp_path)
    try:
        removed = purge(store, ALICE)
        assert removed["reply_traces"] == 2
        assert store.db.query_value("SELECT count(*) FROM reply_traces WHERE user_id = ?", (ALICE,)) == 0
        assert reply_trace.for_user(store.db, ALICE) == []
        assert [t.message_id for t in reply_trace.for_user(store.db, BOB)] == [f"<new-{BOB}>", f"<old-{BOB}>"]
    finally:
        store.close()
