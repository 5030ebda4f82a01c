"""Use and age move the ranking: of two equally relevant memories, the one used lately ranks first, and a memory
left unused long enough falls behind (issue 15). One age anchor (`filters.AGE_ANCHOR`): last use, else creation."""

from __future__ import annotations

from datetime import timedelta

from quinn.clock import iso, utcnow
from quinn.memory import MemoryStore
from quinn.memory.store import STABILITY_CAP_H


def aged(store: MemoryStore, memory_id: int, *, created_days: float, used_days: float | None = None) -> None:
    """Stand for time passing: the store has no clock of its own, so the test moves its timestamps back."""
    now = utcnow()
    used = iso(now - timedelta(days=used_days)) if used_days is not None else None
    store.db.execute("UPDATE memories SET created_at = ?, last_accessed_at = ? WHERE id = ?",
                     (iso(now - timedelta(days=created_days)), used, memory_id))  # fmt: skip


def order(store: MemoryStore, user: str, query: str) -> list[int]:
    return [hit.id for hit in store.search(user, query, k=5, touch=False)]


def test_ranking_moves_with_use_and_age(store: MemoryStore) -> None:
    user = "alice@example.test"
    first = store.add(user, "Alice takes her coffee with oat milk.", importance=0.6)
    second = store.add(user, "Alice takes her coffee with oat milk.", importance=0.6)  # same text: same relevance
    aged(store, first, created_days=30)
    aged(store, second, created_days=30, used_days=0.1)  # used this morning
    assert order(store, user, "how does Alice take her coffee?")[:2] == [second, first]
    aged(store, first, created_days=30, used_days=0.05)  # now the other one is the fresher
    aged(store, second, created_days=30, used_days=20)
    assert order(store, user, "how does Alice take her coffee?")[:2] == [first, second]


def test_retrieval_strengthens_up_to_the_cap(store: MemoryStore) -> None:
    memory_id = store.add("bob@example.test", "Bob cycles to work.")
    start = store.get(memory_id)
    assert start is not None
    for _ in range(60):
        store.record_access([memory_id])
    store.flush_access()
    grown = store.get(memory_id)
    assert grown is not None and grown.access_count == 60
    assert start.stability < grown.stability == STABILITY_CAP_H == 1000.0


def test_my_sister_reaches_what_is_known_about_ana(store: MemoryStore) -> None:
    from datetime import UTC, datetime

    from quinn.memory.graph import Relation, linked_memories, save_graph

    user = "alice@example.test"
    sister = store.add(user, "Alice's sister is called Ana.")
    job = store.add(user, "Ana started a new job as a pharmacist.")
    work = store.add(user, "Alice works at Acme.")
    cousin = store.add(user, "Marta is Alice's cousin and lives in Porto.")
    save_graph(store, user, [("Alice", "person"), ("Ana", "person"), ("Acme", "org"), ("Marta", "person")], [
        Relation("Alice", "has sister", "Ana", sister), Relation("Ana", "works as", "pharmacist", job),
        Relation("Alice", "works at", "Acme", work), Relation("Marta", "cousin of", "Alice", cousin),
    ], datetime.now(UTC))  # fmt: skip
    assert [m.id for m in linked_memories(store, user, "How is my sister getting on?")] == [sister, job]
    assert [m.id for m in linked_memories(store, user, "Is my cousin still in the south?")] == [cousin]
    assert linked_memories(store, user, "How is my brother getting on?") == []
    assert linked_memories(store, "bob@example.test", "How is my sister getting on?") == []  # never across users
