"""Retrieval: long emails as queries, the memory block, full-text fallback, models never mixed, re-embedding."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest

from quinn.errors import StoreError
from quinn.memory import MemoryStore, NewMemory
from quinn.memory.embed import LocalEmbedder, OpenAIEmbedder
from quinn.memory.search import Centre, query_chunks
from tests.lab.llm_server import ScriptedLLM

ALICE = "alice@example.test"

FILLER = [
    "I hope this message finds you well and that the week has been kind to you so far.",
    "The weather here has been grey, and the cat refuses to leave the radiator.",
    "We finally repainted the hallway last weekend, which took far longer than planned.",
    "My neighbour keeps asking whether the street party will happen again this summer.",
    "The train was late twice this week, so I have been reading more than usual.",
    "Anyway, thanks for all the help with the spreadsheet formulas last month.",
]
NEEDLE = "Could you remind me which dentist appointment time I agreed on for my root canal treatment?"


def long_email() -> str:
    return " ".join(FILLER[:3]) + "\n\n" + NEEDLE + "\n\n" + " ".join(FILLER[3:] * 3) + "\n\nBest regards, Alice"


def test_query_chunks_keeps_the_informative_sentences_of_a_long_email():
    text = long_email()
    assert len(text) > 1000
    chunks = query_chunks(text)
    assert chunks[0] == NEEDLE  # the question comes first, though it sits in the middle of the mail
    assert 1 < len(chunks) <= 6 and len(set(chunks)) == len(chunks)  # repeated small talk is taken once
    assert all(chunk in " ".join(text.split()) for chunk in chunks)  # whole sentences, not rewritten
    assert not any("regards" in chunk.lower() for chunk in chunks)
    assert query_chunks("Short question about my dentist?") == ["Short question about my dentist?"]
    assert query_chunks("   ") == []


def test_centred_cosine_is_the_cosine_of_the_vectors_less_their_mean():
    rng = np.random.default_rng(14)
    common = rng.normal(size=16)  # a shared direction, as every memory of one user has
    matrix = common + 0.5 * rng.normal(size=(200, 16))
    matrix = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
    queries = matrix[:3] + 0.1 * rng.normal(size=(3, 16))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    raw, centred = Centre(matrix).similarities(matrix, queries)
    mean = matrix.mean(axis=0)
    rows, asked = matrix - mean, queries - mean
    expected = (rows @ asked.T) / np.outer(np.linalg.norm(rows, axis=1), np.linalg.norm(asked, axis=1))
    assert raw == pytest.approx(matrix @ queries.T, abs=1e-5)
    assert centred == pytest.approx(expected, abs=1e-4)
    # The shared direction no longer counts: raw cosines crowd near the top, centred ones spread out.
    assert float(raw.mean()) > 0.5 > abs(float(centred.mean()))


def test_a_long_email_finds_the_memory_its_one_question_is_about(store: MemoryStore):
    target = store.add(ALICE, "Dentist appointment for the root canal is Tuesday at 9:30", type="context")
    store.add_many([
        NewMemory(ALICE, "Alice's cat is called Miso and loves warm places", type="personal"),
        NewMemory(ALICE, "Alice repainted her hallway in a pale green", type="context"),
        NewMemory(ALICE, "Alice commutes by train and reads on the way", type="fact"),
        NewMemory(ALICE, "Alice's street organises a summer party", type="context"),
        NewMemory(ALICE, "Alice asked for help with spreadsheet formulas", type="context"),
    ])  # fmt: skip
    hits = store.search(ALICE, long_email(), k=3)
    assert hits[0].id == target


def test_without_an_embedder_search_is_full_text_and_says_so_once(
    open_store: Callable[..., MemoryStore], caplog: pytest.LogCaptureFixture
):
    store = open_store(embedder=None)
    mid = store.add(ALICE, "Alice's passport expires in March")
    store.add(ALICE, "Alice likes hiking")
    assert store.get(mid).embedding_model is None  # type: ignore[union-attr]
    with caplog.at_level(logging.WARNING, logger="quinn.memory.search"):
        first = store.search(ALICE, "When does my passport expire?", k=5)
        store.search(ALICE, "hiking", k=5)
    assert first[0].id == mid and first[0].vector_similarity is None and first[0].bm25_rank == 1
    # The other memory of that day's conversation may follow (it is the passport memory's neighbour there), but
    # no word of the query is in it.
    assert [h.id for h in first if h.bm25_rank] == [mid]
    said = [r.getMessage() for r in caplog.records if "full-text only" in r.getMessage()]
    assert said == ["memory search runs on full-text only: no embedder is configured"]
    assert store.find_similar(ALICE, "Alice's passport expires in March") == []


def test_search_never_compares_vectors_of_another_model(
    open_store: Callable[..., MemoryStore], embedder: LocalEmbedder, llm_server: ScriptedLLM,
    caplog: pytest.LogCaptureFixture,
):  # fmt: skip
    remote = OpenAIEmbedder("scripted-embed", llm_server.openai_base_url, "key")
    old = open_store(embedder=remote)
    # Under the scripted model this text's vector is identical to the query's: a perfect, wrong-space match.
    tricky = old.add(ALICE, "zebra crossing")
    new = open_store(embedder=embedder)
    sailing = new.add(ALICE, "Alice goes sailing on weekends")
    with caplog.at_level(logging.WARNING, logger="quinn.memory.search"):
        hits = new.search(ALICE, "zebra crossing", k=5)
        new.search(ALICE, "boats", k=5)
    by_id = {h.id: h for h in hits}
    assert by_id[tricky].vector_similarity is None  # found by its words only, never by the other model's vector
    assert by_id[tricky].bm25_rank == 1
    assert by_id[sailing].vector_similarity is not None
    stale = [r.getMessage() for r in caplog.records if "reembed" in r.getMessage()]
    assert stale == ["1 memories have no local/all-MiniLM-L6-v2 vector and are found by full-text only; "
                     "run `quinn memory reembed`"]  # fmt: skip
    # find_similar, the extraction's dedupe, must not call the wrong-space vector a duplicate either.
    assert new.find_similar(ALICE, "zebra crossing", threshold=0.85) == []


def test_reembed_moves_every_row_to_the_configured_model_and_resumes(
    open_store: Callable[..., MemoryStore], embedder: LocalEmbedder, llm_server: ScriptedLLM
):
    remote = OpenAIEmbedder("scripted-embed", llm_server.openai_base_url, "key")
    old = open_store(embedder=remote)
    ids = old.add_many([NewMemory(ALICE, f"Alice fact number {i}: she collects {i} stamps") for i in range(7)])
    old.forget(ids[0])
    updated = old.update(ids[1], "Alice now collects coins instead of stamps")
    new = open_store(embedder=embedder)
    seen: list[tuple[int, int]] = []

    class Interrupted(Exception):
        pass

    def stop_after_first_batch(done: int, total: int) -> None:
        seen.append((done, total))
        raise Interrupted

    with pytest.raises(Interrupted):
        new.reembed(batch_size=3, progress=stop_after_first_batch)
    assert seen == [(3, 8)]  # 7 rows + the new version; forgotten and superseded rows count too (history, as_of)
    assert new.reembed(batch_size=3, progress=lambda d, t: seen.append((d, t))) == 5  # resumes where it stopped
    assert seen[1:] == [(3, 5), (5, 5)]
    models = {r[0] for r in new.db.query("SELECT embedding_model FROM memories")}
    assert models == {"local/all-MiniLM-L6-v2"}
    blob = new.db.query_value("SELECT embedding FROM memories WHERE id = ?", (updated,))
    expected = embedder.embed(["Alice now collects coins instead of stamps"])[0]
    assert np.allclose(np.frombuffer(blob, dtype=np.float32), expected, atol=1e-5)
    assert new.reembed() == 0
    hits = new.search(ALICE, "coin collection", k=1)
    assert hits[0].id == updated and hits[0].vector_similarity is not None
    with pytest.raises(StoreError, match="reembed needs an embedder"):
        open_store(embedder=None).reembed()
