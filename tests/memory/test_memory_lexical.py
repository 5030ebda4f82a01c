"""The lexical leg: common terms left out past the postings budget, and the leg run beside the vector leg."""

from __future__ import annotations

import threading

from quinn.memory import MemoryStore, NewMemory
from quinn.memory.filters import memory_filter
from quinn.memory.lexical import (
    common_to_owners,
    document_frequencies,
    joined_terms,
    lexical_scores,
    match_expression,
    query_terms,
    within_budget,
)
from quinn.memory.lexical import owned as owned_match

ALICE = "alice@example.test"
BOB = "bob@example.test"


def test_joined_terms_are_neighbouring_content_words_written_as_one():
    text = "Where did my step father go? Check the e-mail, then the data base\nnew line"
    assert joined_terms(text) == ["stepfather", "fathergo", "email", "database", "newline"]
    assert joined_terms("Send the email by e-mail") == []  # "email" is a word of the text already
    assert joined_terms("version 2 draft, room 101b") == []  # letters only


def test_within_budget_keeps_the_rarest_terms_that_fit_and_always_one():
    terms = ["meeting", "zanzibar", "project", "ghost"]
    assert within_budget(terms, [900, 3, 400, 0], budget=500) == ["zanzibar", "project"]
    assert within_budget(terms, [900, 3, 400, 0], budget=10_000) == ["zanzibar", "project", "meeting"]
    assert within_budget(terms, [900, 700, 800, 0], budget=500) == ["zanzibar"]  # the rarest, though over budget
    assert within_budget(terms, [0, 0, 0, 0], budget=500) == []  # a term found nowhere matches nothing


def _plant(store: MemoryStore) -> dict[str, int]:
    common = [f"Weekly meeting number {i} went fine, nothing to report." for i in range(40)]
    rows = [NewMemory(user_id=BOB, content=text, scope="episodic") for text in common]
    rows += [
        NewMemory(user_id=ALICE, content="The Zanzibar trip is booked for the spring meeting.", scope="episodic"),
        NewMemory(user_id=ALICE, content="Another meeting about the garden.", scope="episodic"),
    ]
    ids = store.add_many(rows)
    return {"zanzibar": ids[-2], "garden": ids[-1]}


def test_a_common_term_past_the_budget_is_left_out_of_the_match_but_counts_in_the_idf(store: MemoryStore):
    planted = _plant(store)
    where, params = memory_filter(ALICE)
    text = "meeting in Zanzibar"
    assert query_terms(text) == ["meeting", "zanzibar"]
    _total, frequencies = document_frequencies(store.db, query_terms(text))
    assert frequencies == [42, 1]
    everything, _ = lexical_scores(store.db, where, params, text, budget=1000)
    assert set(everything) == {planted["zanzibar"], planted["garden"]}  # both match "meeting"
    assert everything[planted["zanzibar"]][0] == 1
    rare_only, rows = lexical_scores(store.db, where, params, text, budget=10)
    assert set(rare_only) == {planted["zanzibar"]} == set(rows)  # "meeting" (42 rows) was left out
    # Coverage is measured against the whole query's IDF: matching the rare word alone is not a full match.
    assert 0 < rare_only[planted["zanzibar"]][1] < 1.0


def test_a_possessive_or_a_compound_written_apart_finds_the_plain_word(store: MemoryStore):
    """The index splits "Phoebe's" at the apostrophe, so the term "phoebe's" matched only "Phoebe's"; and a stemmer
    keeps "step father" apart from "stepfather". Both now find the memory, with the whole query's IDF as the mass
    (a join adds none: it is the same two words)."""
    rows = [NewMemory(user_id=ALICE, content=text, scope="episodic") for text in (
        "Phoebe sings at the coffee house on Fridays.", "My stepfather went to jail.", "Rain all week.",
        "The garden needs water.", "My father sends his love.", "Father and I went fishing.")]  # fmt: skip
    ids = store.add_many(rows)
    where, params = memory_filter(ALICE)
    assert query_terms("Where does Phoebe's band play?") == ["phoebe", "band", "play"]
    sings, _ = lexical_scores(store.db, where, params, "Where does Phoebe's band play?")
    assert list(sings) == [ids[0]]
    jail, _ = lexical_scores(store.db, where, params, "Whatever happened to my step father?")
    assert next(iter(jail)) == ids[1]  # ranked first, above the plain "father"s
    assert 0 < jail[ids[1]][1] <= 1.0


def test_search_inside_a_transaction_runs_its_lexical_leg_inline(store: MemoryStore):
    planted = _plant(store)
    outcome: list[object] = []

    def search_in_transaction() -> None:
        with store.db.transaction():
            outcome.append([hit.memory.id for hit in store.search(ALICE, "Zanzibar trip", k=1, touch=False)])

    worker = threading.Thread(target=search_in_transaction, daemon=True)
    worker.start()
    worker.join(timeout=60)
    # A lexical leg handed to the background thread would wait forever for the connection this one holds.
    assert not worker.is_alive(), "search inside a transaction deadlocked"
    assert outcome == [[planted["zanzibar"]]]


def test_the_owner_filter_reads_only_the_users_postings_and_changes_no_score(store: MemoryStore):
    planted = _plant(store)
    where, params = memory_filter(ALICE)
    text = "meeting in Zanzibar"
    everyone, _ = lexical_scores(store.db, where, params, text)  # the user filter in SQL only
    owned, rows = lexical_scores(store.db, where, params, text, owners=[ALICE])
    assert set(owned) == set(everyone) == set(rows) == {planted["zanzibar"], planted["garden"]}
    for mid, (rank, coverage) in owned.items():
        assert everyone[mid] == (rank, coverage)
    # Bob's 40 meeting memories are not even matched: the MATCH itself is narrowed to Alice's token.
    match = owned_match(match_expression(["meeting"]), [ALICE])
    assert store.db.query_value("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", (match,)) == 2
    match = owned_match(match_expression(["meeting"]), [BOB])
    assert store.db.query_value("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", (match,)) == 40
    # A user who holds half the index or more is matched without the owner term: the AND would cost more.
    most, _ = lexical_scores(store.db, where, params, text, owners=[ALICE], owned_rows=10**6)
    assert most == everyone


def test_a_word_in_most_of_a_users_memories_is_left_out_of_the_match(store: MemoryStore):
    chat = [f"Arturo: ha, classic number {i}" for i in range(40)] + [f"Dmitri: fine, thanks {i}" for i in range(19)]
    rows = [NewMemory(user_id=ALICE, content=text, scope="episodic") for text in chat]
    rows += [NewMemory(user_id=ALICE, content="Arturo: we adopted a corgi called Juniper", scope="episodic")]
    rows += [NewMemory(user_id=BOB, content=f"Arturo: hello {i}", scope="episodic") for i in range(10)]
    ids = store.add_many(rows)
    corgi = ids[59]
    text = "What did Arturo adopt?"
    terms = query_terms(text)
    frequencies = document_frequencies(store.db, terms)[1]
    assert common_to_owners(store.db, [ALICE], terms, frequencies) == {"arturo"}  # in 41 of Alice's 60
    assert common_to_owners(store.db, [BOB], terms, frequencies) == set()  # 10 memories: too few to tell
    where, params = memory_filter(ALICE)
    narrowed, _ = lexical_scores(store.db, where, params, text, owners=[ALICE])
    assert list(narrowed) == [corgi]  # only the memory that matches the rest of the question
    everything, _ = lexical_scores(store.db, where, params, text)  # no owners: global statistics only
    assert corgi in everything and len(everything) == 41
    # When every word of the question is common, the rarest one still matches.
    assert len(lexical_scores(store.db, where, params, "Arturo?", owners=[ALICE])[0]) == 41
