"""The one rule of a current memory (``filters.CURRENT``): the SQL every query for current memories uses agrees
with ``Memory.current``, and its negations with it, on rows in every state a memory can be in."""

from __future__ import annotations

from quinn.memory.filters import CURRENT, MAY_BE_RETRACTED, NOT_CURRENT, current
from quinn.memory.store import MemoryStore

ALICE = "alice@example.org"


def test_the_sql_rule_and_memory_current_agree_in_every_state(open_store):
    store: MemoryStore = open_store(embedder=None)
    kept = store.add(ALICE, "Alice keeps bees.", type="fact")
    old = store.add(ALICE, "Alice lives in Turin.", type="fact")
    store.update(old, "Alice lives in Milan.", user_id=ALICE)
    store.forget(store.add(ALICE, "Alice likes opera.", type="preference"), user_id=ALICE)
    store.complete(store.add(ALICE, "Alice plans a trip.", type="goal"), user_id=ALICE)
    store.add(ALICE, "Alice is in Rome this week.", type="context", expires_at="2026-01-02T00:00:00+00:00")
    rows = store.get_all(ALICE, include_inactive=True)
    assert len(rows) == 6 and {m.current for m in rows} == {True, False}

    def ids(where: str) -> set[int]:
        return {r[0] for r in store.db.query(f"SELECT id FROM memories m WHERE {where}")}

    assert ids(CURRENT) == ids(current("m")) == {m.id for m in rows if m.current}
    assert ids(NOT_CURRENT) == {m.id for m in rows if not m.current}
    assert kept in ids(CURRENT)
    # The expired one is current but may be retracted: the partial index covers it and every one not current.
    assert ids(MAY_BE_RETRACTED) == {m.id for m in rows if not m.current or m.expires_at is not None}


def test_retracted_reads_use_the_partial_index(open_store):
    store: MemoryStore = open_store(embedder=None)
    plan = store.db.query(
        f"EXPLAIN QUERY PLAN SELECT id FROM memories WHERE user_id = ? AND {MAY_BE_RETRACTED}"
        f" AND ({NOT_CURRENT} OR expires_at <= ?)",
        (ALICE, "2026-01-01"),
    )
    assert any("memories_retracted" in str(row[-1]) for row in plan), plan
