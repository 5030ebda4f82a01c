"""The store's contract on both backends (a libSQL file and a real sqld): create, read, version, forget, filter."""

from __future__ import annotations

import re

import numpy as np
import pytest

from quinn.errors import StoreError
from quinn.memory import MemoryStore, NewMemory
from quinn.memory.models import iso, utcnow

ALICE = "alice@example.test"
BOB = "bob@example.test"


def test_add_and_get_round_trip_every_field(store: MemoryStore):
    metadata = {
        "source": {"message_id": "<m1@example.test>", "subject": "Hi", "date": "2026-05-01T10:00:00+00:00"},
        "confidence": 0.9, "relations": [{"to": 3, "kind": "about"}], "pii": False, "custom": {"nested": [1, "x"]},
    }  # fmt: skip
    mid = store.add(" Alice@Example.test ", "Alice prefers tea over coffee", scope="profile", type="preference",
                    domain="food", tags=["drinks", "morning", "drinks"], metadata=metadata, importance=0.8,
                    valid_from="2026-05-01T10:00:00+02:00", expires_at="2099-01-01")  # fmt: skip
    memory = store.get(mid)
    assert memory is not None
    assert memory.user_id == ALICE  # addresses are compared trimmed and lower-cased
    assert (memory.scope, memory.type, memory.domain) == ("profile", "preference", "food")
    assert memory.content == "Alice prefers tea over coffee"
    assert memory.tags == ("drinks", "morning")
    assert memory.metadata == metadata  # callers' own keys come back unchanged
    assert memory.importance == 0.8
    assert memory.valid_from == "2026-05-01T08:00:00+00:00"  # stored as UTC
    assert memory.expires_at == "2099-01-01T00:00:00+00:00"
    assert (memory.version, memory.root_id, memory.valid_to, memory.superseded_by) == (1, mid, None, None)
    assert memory.active and not memory.immutable and memory.current
    assert (memory.access_count, memory.last_accessed_at, memory.stability) == (0, None, 24.0)
    assert memory.embedding_model == "local/all-MiniLM-L6-v2"
    assert memory.schema_version == 1
    assert re.fullmatch(r"[0-9a-f]{32}", memory.uid)
    assert memory.created_at == memory.updated_at
    blob = store.db.query_value("SELECT embedding FROM memories WHERE id = ?", (mid,))
    vector = np.frombuffer(blob, dtype=np.float32)
    assert vector.shape == (384,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4


def test_json_content_round_trips_and_is_searchable(store: MemoryStore):
    plan = {"trip": "Lisbon", "dates": ["2026-09-01", "2026-09-08"], "budget_eur": 1200}
    mid = store.add(ALICE, plan, scope="episodic", type="goal")
    memory = store.get(mid)
    assert memory is not None and memory.content_format == "json"
    assert memory.value == plan
    assert store.get_all(ALICE)[0].value == plan
    assert [h.id for h in store.search(ALICE, "trip to Lisbon", k=3)] == [mid]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (NewMemory(ALICE, "   "), "memory #2: content must not be empty"),
        (NewMemory(ALICE, "x", scope="forever"), "memory #2: scope 'forever' is not one of"),
        (NewMemory(ALICE, "x", type="two words"), "memory #2: type 'two words' must be a word"),
        (NewMemory(ALICE, "x", importance=1.5), "memory #2: importance 1.5 must be a number between 0 and 1"),
        (NewMemory(ALICE, "x", importance=float("nan")), "memory #2: importance nan"),
        (NewMemory(ALICE, "x", scope="global"), "memory #2: global memories have no user"),
        (NewMemory(None, "x", scope="profile"), "memory #2: scope profile needs a user"),
        (NewMemory(ALICE, "x", metadata={1: "a"}), "memory #2: metadata would not round-trip"),
        (NewMemory(ALICE, "x", metadata={"a": (1, 2)}), "memory #2: metadata would not round-trip"),
        (NewMemory(ALICE, "x", metadata={"a": float("inf")}), "memory #2: metadata is not JSON"),
        (NewMemory(ALICE, "x", metadata={"a": object()}), "memory #2: metadata is not JSON"),
        (NewMemory(ALICE, "x", valid_from="last tuesday"), "memory #2: valid_from 'last tuesday' is not a date"),
        (NewMemory(ALICE, "x", tags=("ok", "")), "memory #2: tags must be non-empty strings"),
        (NewMemory(ALICE, 42), "memory #2: content must be text, a JSON object or a JSON array"),  # type: ignore[arg-type]
    ],
)
def test_add_many_refuses_bad_input_and_writes_nothing(store: MemoryStore, item: NewMemory, message: str):
    good = [NewMemory(ALICE, "first good memory"), NewMemory(ALICE, "second good memory")]
    with pytest.raises(StoreError) as info:
        store.add_many([*good, item])
    assert message in str(info.value)
    assert store.get_all(ALICE, include_inactive=True) == []


def test_add_many_keeps_order_in_one_transaction(store: MemoryStore):
    items = [NewMemory(ALICE, f"memory number {i} about topic {i % 7}", tags=(f"t{i % 3}",)) for i in range(230)]
    ids = store.add_many(items)
    assert len(ids) == len(set(ids)) == 230
    assert [store.get(i).content for i in ids[:3] + ids[-2:]] == [  # type: ignore[union-attr]
        "memory number 0 about topic 0", "memory number 1 about topic 1", "memory number 2 about topic 2",
        "memory number 228 about topic 4", "memory number 229 about topic 5",
    ]  # fmt: skip
    roots = store.db.query_value("SELECT count(*) FROM memories WHERE root_id = id")
    logged = store.db.query_value("SELECT count(*) FROM memory_versions WHERE change = 'created'")
    assert roots == logged == 230
    assert store.add_many([]) == []


def test_update_writes_a_new_version_and_closes_the_old(store: MemoryStore):
    mid = store.add(ALICE, "Alice works at Acme", type="fact", metadata={"source": "mail 1", "keep": True},
                    valid_from="2026-01-01")  # fmt: skip
    new_id = store.update(mid, "Alice works at Globex", user_id=ALICE, valid_from="2026-03-01",
                          metadata={"source": "mail 2"}, reason="changed jobs")  # fmt: skip
    old, new = store.get(mid), store.get(new_id)
    assert old is not None and new is not None
    assert old.content == "Alice works at Acme"  # the old row keeps its content
    assert (old.valid_to, old.superseded_by, old.current) == ("2026-03-01T00:00:00+00:00", new_id, False)
    assert (new.version, new.root_id, new.valid_from, new.current) == (2, mid, "2026-03-01T00:00:00+00:00", True)
    assert new.metadata == {"source": "mail 2", "keep": True}
    assert [m.content for m in store.get_all(ALICE)] == ["Alice works at Globex"]
    assert [m.id for m in store.history(new_id)] == [m.id for m in store.history(mid)] == [mid, new_id]
    assert [(c.change, c.version, c.reason) for c in store.changes(new_id)] == [
        ("created", 1, None), ("updated", 2, "changed jobs"), ("superseded", 1, "changed jobs")
    ]  # fmt: skip
    with pytest.raises(StoreError, match=f"memory {mid} is not current"):
        store.update(mid, "again")


def test_update_refuses_another_users_memory_like_a_missing_one(store: MemoryStore):
    mid = store.add(ALICE, "Alice's secret plan")
    with pytest.raises(StoreError) as other:
        store.update(mid, "hijacked", user_id=BOB)
    with pytest.raises(StoreError) as missing:
        store.update(999_999, "nothing", user_id=BOB)
    assert str(other.value) == f"memory {mid} not found"
    assert str(missing.value) == "memory 999999 not found"
    with pytest.raises(StoreError, match="not found"):
        store.forget(mid, user_id=BOB)
    assert store.get(mid, user_id=BOB) is None
    assert store.get(mid, user_id=ALICE) is not None


def test_update_from_an_older_email_never_gives_a_negative_span(store: MemoryStore):
    mid = store.add(ALICE, "Alice lives in Berlin", valid_from="2026-05-01")
    new_id = store.update(mid, "Alice lives in Hamburg", valid_from="2026-04-01")
    old = store.get(mid)
    assert old is not None and old.valid_to == old.valid_from == "2026-05-01T00:00:00+00:00"
    assert store.get(new_id).valid_from == "2026-05-01T00:00:00+00:00"  # type: ignore[union-attr]


def test_immutable_memories_refuse_the_agent_but_not_an_operator_purge(store: MemoryStore):
    mid = store.add(ALICE, "Alice is allergic to peanuts", type="personal", immutable=True)
    with pytest.raises(StoreError, match=f"memory {mid} is immutable; only an operator can update it"):
        store.update(mid, "Alice is not allergic", user_id=ALICE)
    with pytest.raises(StoreError, match="immutable; only an operator can forget it"):
        store.forget(mid, user_id=ALICE)
    with pytest.raises(StoreError, match="immutable; only an operator can supersede it"):
        store.supersede([mid], NewMemory(ALICE, "merged"))
    assert store.get(mid).current  # type: ignore[union-attr]
    new_id = store.update(mid, "Alice is allergic to peanuts and cashews", allow_immutable=True)
    assert store.get(new_id).immutable  # type: ignore[union-attr]  # the next version stays immutable
    assert store.purge(ALICE)["memories"] == 2
    assert store.get(new_id) is None


def test_forget_hides_from_retrieval_but_keeps_history(store: MemoryStore):
    keep = store.add(ALICE, "Alice plays the cello")
    gone = store.add(ALICE, "Alice plays the violin")
    store.forget(gone, user_id=ALICE, reason="user asked")
    assert [m.id for m in store.get_all(ALICE)] == [keep]
    assert gone not in [h.id for h in store.search(ALICE, "violin", k=5)]
    assert gone not in [h.id for h in store.search(ALICE, "violin", k=5, as_of=utcnow())]
    assert {m.id for m in store.get_all(ALICE, include_inactive=True)} == {keep, gone}
    assert [m.active for m in store.history(gone)] == [False]
    assert [c.change for c in store.changes(gone)] == ["created", "forgotten"]
    with pytest.raises(StoreError, match="not current"):
        store.forget(gone)


def test_supersede_replaces_several_memories_with_one(store: MemoryStore):
    a = store.add(ALICE, "Alice likes jazz", type="preference")
    b = store.add(ALICE, "Alice enjoys jazz concerts", type="preference")
    other = store.add(BOB, "Bob likes jazz", type="preference")
    merged = store.supersede([a, b], NewMemory(ALICE, "Alice loves jazz, live best", type="preference"),
                             reason="consolidation")  # fmt: skip
    assert [m.id for m in store.get_all(ALICE)] == [merged]
    assert {store.get(a).superseded_by, store.get(b).superseded_by} == {merged}  # type: ignore[union-attr]
    with pytest.raises(StoreError, match=f"memory {other} not found"):
        store.supersede([other], NewMemory(ALICE, "stolen"))
    with pytest.raises(StoreError, match=f"memory {merged} not found"):
        store.supersede([merged], NewMemory(None, "global now", scope="global"))


def test_filters(store: MemoryStore):
    now = utcnow()
    ids = store.add_many([
        NewMemory(ALICE, "Runs marathons", scope="profile", type="fact", domain="sport", tags=("running", "health"),
                  importance=0.9, valid_from="2026-01-10"),
        NewMemory(ALICE, "Prefers morning meetings", scope="profile", type="preference", domain="work",
                  tags=("meetings",), importance=0.4, valid_from="2026-02-10"),
        NewMemory(ALICE, "Quarterly report due", scope="episodic", type="goal", domain="work",
                  tags=("report", "health"), importance=0.7, valid_from="2026-03-10"),
        NewMemory(ALICE, "Coupon code expired", scope="episodic", type="context", valid_from="2026-01-01",
                  expires_at=iso(now.replace(year=now.year - 1))),
        NewMemory(None, "Quinn is concise", scope="global", type="persona"),
    ])  # fmt: skip
    run, meet, report, coupon, persona = ids

    def got(**filters):
        return {m.id for m in store.get_all(ALICE, **filters)}

    assert got() == {run, meet, report}  # the expired coupon is out
    assert got(scope="episodic") == {report}
    assert got(domain="work") == {meet, report}
    assert got(type="preference") == {meet}
    assert got(tags=["health", "meetings"]) == {run, meet, report}
    assert got(tags=["health", "report"], tags_mode="all") == {report}
    assert got(tags="running") == {run}
    assert got(since="2026-02-01") == {meet, report}
    assert got(since="2026-02-01", until="2026-03-01") == {meet}
    assert got(min_importance=0.5) == {run, report}
    assert got(include_inactive=True) == {run, meet, report, coupon}
    assert got(as_of="2026-02-15") == {run, meet}
    assert got(include_global=True) == {run, meet, report, persona}
    assert [m.id for m in store.get_all(None)] == [persona]
    assert [m.id for m in store.get_all(ALICE, limit=2)] == [report, meet]  # newest first
    assert {h.id for h in store.search(ALICE, "work meetings report", k=10, domain="work")} == {meet, report}
    for bad, message in (({"scope": "nope"}, "filter scope 'nope'"), ({"tags": ["x"], "tags_mode": "some"},
                         "filter tags_mode 'some'"), ({"as_of": "yesterday"}, "filter as_of 'yesterday'")):  # fmt: skip
        with pytest.raises(StoreError, match=message):
            store.get_all(ALICE, **bad)


def test_project_alpha_versioning(store: MemoryStore):
    """Acceptance: the deadline moves; search sees only the new date, as_of the old one, history both."""
    first = store.add(ALICE, "Project Alpha deadline is June 30", scope="domain", type="fact", domain="work",
                      valid_from="2026-05-02T09:00:00Z")  # fmt: skip
    second = store.update(first, "Project Alpha deadline moved to July 15", user_id=ALICE,
                          valid_from="2026-06-10T14:00:00Z", reason="email of 2026-06-10")  # fmt: skip
    store.add(ALICE, "Alice's team uses Jira for Project Beta", scope="domain", type="fact", domain="work")

    now_hits = store.search(ALICE, "When is the Project Alpha deadline?", k=5)
    texts = [h.content for h in now_hits]
    assert "Project Alpha deadline moved to July 15" in texts
    assert "Project Alpha deadline is June 30" not in texts
    assert now_hits[0].id == second

    past_hits = store.search(ALICE, "When is the Project Alpha deadline?", k=5, as_of="2026-06-01")
    assert [h.content for h in past_hits if "Alpha" in h.content] == ["Project Alpha deadline is June 30"]
    assert past_hits[0].valid_to == "2026-06-10T14:00:00+00:00"

    assert [m.content for m in store.get_all(ALICE, as_of="2026-06-01")] == ["Project Alpha deadline is June 30"]
    history = store.history(second)
    assert [(m.version, m.content) for m in history] == [
        (1, "Project Alpha deadline is June 30"), (2, "Project Alpha deadline moved to July 15")
    ]  # fmt: skip


def test_search_hits_carry_the_memory_and_strengthen_it(store: MemoryStore):
    mid = store.add(ALICE, "Alice's dog is called Pixel", scope="profile", type="personal", domain="home",
                    tags=["pets"], metadata={"confidence": 0.8})  # fmt: skip
    store.add(ALICE, "Alice drives a blue bicycle to work")
    [hit, *_rest] = store.search(ALICE, "what is the name of Alice's dog?", k=2, touch=False)
    assert (hit.id, hit.type, hit.scope, hit.domain, hit.tags) == (mid, "personal", "profile", "home", ("pets",))
    assert hit.metadata == {"confidence": 0.8} and hit.valid_to is None and hit.valid_from
    assert hit.score > 0 and hit.vector_similarity is not None and hit.vector_similarity > 0.4
    assert store.get(mid).access_count == 0  # type: ignore[union-attr]  # touch=False leaves it alone
    hits = store.search(ALICE, "what is the name of Alice's dog?", k=2)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    store.search(ALICE, "Pixel the dog", k=1)
    assert store.get(mid).access_count == 0  # type: ignore[union-attr]  # batched: no commit per search
    assert store.flush_access() == 2
    after = store.get(mid)
    assert after is not None and after.access_count == 2
    assert after.stability == pytest.approx(24.0 * 1.2 * 1.2)
    assert after.last_accessed_at is not None
    assert store.flush_access() == 0


def test_retrieval_counts_are_written_in_batches_and_at_close(open_store):
    store = open_store()
    ids = store.add_many([NewMemory(ALICE, f"Alice note {i} about gardening") for i in range(70)])
    store.record_access(ids[:63])
    assert store.db.query_value("SELECT sum(access_count) FROM memories") == 0
    store.record_access(ids[63:65])  # the 64th waiting memory triggers one batched write, on the store's thread
    assert store.flush_access() == 0  # it waits for that write: nothing was left for it to write
    assert store.db.query_value("SELECT sum(access_count) FROM memories") == 65
    store.record_access([ids[0], ids[0]], now="2026-11-01T00:00:00Z")
    store.close()
    reopened = open_store()
    first = reopened.get(ids[0])
    assert first is not None and first.access_count == 3
    assert first.stability == pytest.approx(24.0 * 1.2**3)
    assert store.search(ALICE, "  ", k=3) == []


def test_find_similar_uses_the_threshold(store: MemoryStore):
    mid = store.add(ALICE, "Alice's favourite colour is green")
    store.add(ALICE, "Alice owns a red car")
    store.add(BOB, "Bob's favourite colour is green")
    similar = store.find_similar(ALICE, "Alice's favorite color is green", threshold=0.85)
    assert [h.id for h in similar] == [mid]
    assert similar[0].score >= 0.85
    assert store.find_similar(ALICE, "The weather in Oslo is cold", threshold=0.85) == []
    loose = store.find_similar(ALICE, "Alice's favorite color is green", threshold=0.0)
    assert {h.memory.user_id for h in loose} == {ALICE} and len(loose) == 2


def test_a_newer_schema_is_refused(database_url: str, store: MemoryStore):
    store.db.executescript("PRAGMA user_version = 99;")
    with pytest.raises(StoreError, match="has schema version 99, newer than this Quinn's"):
        MemoryStore.open(database_url, embedder=None)


class CarelessEmbedder:
    """The real model behind a careless adapter: float64 rows, as a numpy default would give (FACTS.md: an
    F32_BLOB takes them silently as twice as many floats)."""

    def __init__(self, inner, dtype=np.float64, poison: bool = False) -> None:
        self.inner, self.model_id, self.dim, self.dtype, self.poison = inner, inner.model_id, inner.dim, dtype, poison

    def embed(self, texts):
        vectors = self.inner.embed(texts).astype(self.dtype)
        if self.poison:
            vectors[0, 0] = np.nan
        return vectors


@pytest.mark.parametrize(("dtype", "poison", "message"), [
    (np.float64, False, "returned shape (1, 384) float64, expected (1, 384) float32"),
    (np.float32, True, "returned NaN or infinite values"),
])  # fmt: skip
def test_vectors_are_checked_before_every_insert(open_store, embedder, dtype, poison, message):
    careless = open_store(embedder=CarelessEmbedder(embedder, dtype, poison))
    with pytest.raises(StoreError, match=re.escape(message)):
        careless.add(ALICE, "Alice sails")
    mid = open_store().add(ALICE, "Alice sails")
    with pytest.raises(StoreError, match=re.escape(message)):
        careless.update(mid, "Alice sails a catamaran")
    assert [m.content for m in careless.get_all(ALICE, include_inactive=True)] == ["Alice sails"]
