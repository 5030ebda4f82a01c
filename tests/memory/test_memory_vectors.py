"""The in-memory vector matrices: the same ranking as the SQL scan, and coherent with every writer."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from quinn.memory import MemoryStore
from quinn.memory.embed import OpenAIEmbedder
from quinn.memory.filters import memory_filter
from quinn.memory.models import iso, utcnow
from quinn.memory.rows import insert_rows
from quinn.memory.search import CANDIDATES, _cached_matrix, _cached_vector_ranks, _sql_vector_ranks
from tests.lab.llm_server import ScriptedLLM

ALICE = "alice@example.test"
BOB = "bob@example.test"
WORDS = "tea coffee bike train lisbon cello garden bees report deadline alpha budget meeting dog cat river".split()


def _plant(
    store: MemoryStore, llm: ScriptedLLM, user: str | None, count: int, rng: random.Random, **fields: str
) -> list[int]:
    """Rows with the scripted model's vectors, written directly: thousands of memories without an HTTP call each."""
    now = iso(utcnow())
    rows = []
    for i in range(count):
        content = f"{user} note {i}: " + " ".join(rng.choices(WORDS, k=6))
        rows.append({
            "user_id": user, "scope": fields.get("scope", "global" if user is None else "profile"), "domain": None,
            "type": fields.get("type", rng.choice(["fact", "preference", "goal"])), "content": content,
            "content_format": "text", "tags": "[]", "metadata": "{}", "importance": rng.random(),
            "created_at": now, "updated_at": now, "valid_from": f"2026-0{rng.randint(1, 9)}-01T00:00:00+00:00",
            "expires_at": None, "embedding": np.array(llm.embed(content), dtype=np.float32).tobytes(),
            "embedding_model": store.embedder.model_id if store.embedder else None,
        })  # fmt: skip
    with store.db.transaction() as tx:
        return insert_rows(tx, rows)


@pytest.fixture
def scripted(llm_server: ScriptedLLM) -> OpenAIEmbedder:
    return OpenAIEmbedder("scripted-embed", llm_server.openai_base_url, None)


def test_cached_ranking_equals_the_sql_scan(
    open_store: Callable[..., MemoryStore], scripted: OpenAIEmbedder, llm_server: ScriptedLLM
):
    store = open_store(embedder=scripted)
    rng = random.Random(3)
    _plant(store, llm_server, ALICE, 300, rng)
    _plant(store, llm_server, BOB, 300, rng)
    _plant(store, llm_server, None, 20, rng)
    for case in range(40):
        filters = rng.choice([{}, {"type": "goal"}, {"since": "2026-05-01"}, {"include_global": True},
                              {"min_importance": 0.9}, {"as_of": "2026-04-15"}])  # fmt: skip
        user = rng.choice([ALICE, BOB])
        where, params = memory_filter(user, **filters)
        query = np.array([llm_server.embed(" ".join(rng.choices(WORDS, k=3)))], dtype=np.float32)
        owners = [user, None] if filters.get("include_global") else [user]
        cached_found: dict[int, tuple] = {}
        sql_found: dict[int, tuple] = {}
        matrix = _cached_matrix(store, owners)
        assert matrix is not None
        cached = _cached_vector_ranks(store, where, params, query, cached_found, matrix)
        scanned = _sql_vector_ranks(store, where, params, query, sql_found)
        assert len(cached) == len(scanned) == min(CANDIDATES, len(store.get_all(user, **filters))), case
        for mid in cached.keys() & scanned.keys():
            assert cached[mid][1] == pytest.approx(scanned[mid][1], abs=1e-5)
        # Outside exact ties at the 50th place, both pick the same memories in the same order.
        cut = min(sim for _rank, sim in scanned.values())
        firm = [mid for mid, (_r, sim) in sorted(scanned.items(), key=lambda kv: kv[1][0]) if sim > cut + 1e-5]
        assert [mid for mid in sorted(cached, key=lambda m: cached[m][0])][: len(firm)] == firm
        assert set(cached) <= set(cached_found)  # the rows the ranking read are those it ranked
        owners = store.db.query(f"SELECT DISTINCT user_id FROM memories WHERE id IN ({','.join(map(str, cached))})")
        assert {owner for (owner,) in owners} <= {user, None}


def test_cache_follows_other_writers(
    database_url: str, open_store: Callable[..., MemoryStore], scripted: OpenAIEmbedder, llm_server: ScriptedLLM
):
    reader = open_store(embedder=scripted)
    writer = open_store(embedder=scripted)  # another connection, as a second process would have
    first = writer.add(ALICE, "Alice keeps bees in the garden")
    assert reader.search(ALICE, "Alice keeps bees in the garden", k=1)[0].id == first  # loads the matrix
    second = writer.add(ALICE, "Alice rides a red bike to work")  # an insert: appended to the cached matrix
    [hit] = reader.search(ALICE, "Alice rides a red bike to work", k=1)
    assert hit.id == second and hit.vector_similarity == pytest.approx(1.0, abs=1e-5)
    assert reader.vector_cache is not None and len(reader.vector_cache._entries[(ALICE, scripted.model_id)].ids) == 2

    other = OpenAIEmbedder("another-model", llm_server.openai_base_url, None)
    moved = open_store(embedder=other)
    assert moved.reembed() == 2  # vectors of another model now: the reader must not compare them
    hits = reader.search(ALICE, "Alice rides a red bike to work", k=2)
    assert hits[0].id == second and all(h.vector_similarity is None for h in hits)  # found by words only

    writer.purge(ALICE)
    assert reader.search(ALICE, "bike", k=5) == []


def test_too_many_vectors_or_too_narrow_a_filter_fall_back_to_sql(
    open_store: Callable[..., MemoryStore], scripted: OpenAIEmbedder, llm_server: ScriptedLLM
):
    rng = random.Random(5)
    tiny = open_store(embedder=scripted, vector_cache_mb=0.01)  # 10 KiB: not even 10 vectors of 384 floats
    ids = _plant(tiny, llm_server, ALICE, 30, rng)
    hits = tiny.search(ALICE, "garden bees", k=3)
    assert len(hits) == 3 and all(h.vector_similarity is not None for h in hits)
    assert tiny.vector_cache is not None and not tiny.vector_cache._entries

    store = open_store(embedder=scripted)
    _plant(store, llm_server, ALICE, 4500, rng, type="fact")
    rare = _plant(store, llm_server, ALICE, 3, rng, type="rare")
    hits = store.search(ALICE, "garden bees river", k=10, type="rare")
    assert {h.id for h in hits} == set(rare) and all(h.vector_similarity is not None for h in hits)
    assert set(ids).isdisjoint(h.id for h in hits)
