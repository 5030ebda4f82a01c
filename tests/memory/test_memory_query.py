"""What a search reads from a question besides its words (issue 31): named days, parts, rank fusion; and that the
shipped search uses them on a real store with the real model."""

from __future__ import annotations

from datetime import UTC, date, datetime

from quinn.memory import MemoryStore, NewMemory
from quinn.memory.query import day_clause, looks_back, named_days, query_parts, rrf
from quinn.memory.search import SHIPPED, hybrid_search

ALICE = "alice@example.test"


def test_named_days_reads_the_usual_ways_of_writing_a_day_and_drops_impossible_ones():
    assert named_days("What did we say on Wednesday 26 February 2025?") == [(2025, 2, 26)]
    assert named_days("on Feb 3rd, 2024 or 2025-03-01") == [(2025, 3, 1), (2024, 2, 3)]
    assert named_days("the 4th of July") == [(None, 7, 4)]
    assert named_days("29 February") == [(None, 2, 29)]
    assert named_days("31 February 2025, or May I ask") == []


def test_looks_back_tells_a_question_about_the_past_from_one_about_now():
    """Issue 32: only an email that looks back in time is shown the versions its memories replaced."""
    today = date(2026, 11, 29)
    back = ["Which city did I live in in September 2024?", "Where did I live before Lund?", "What was my old address?",
            "Has my manager changed?", "Where did we go 3 years ago?", "What did I say on 4 May?",
            "What was true in March?", "Which team was I on in 2025?"]  # fmt: skip
    now = ["Which city do I live in at the moment?", "How long does my commute to work take these days?",
           "Do I still take the train?", "May I ask what my pottery evening is now?", "What is on in 2027?",
           "Shall we march on with the plan?", "Who is my manager these days? Please keep it short."]  # fmt: skip
    assert [q for q in back if not looks_back(q, today)] == []
    assert [q for q in now if looks_back(q, today)] == []


def test_day_clause_matches_iso_timestamps_of_the_day_with_or_without_year():
    clause, params = day_clause([(2025, 1, 15), (None, 7, 4)], "m.valid_from")
    assert clause == "(substr(m.valid_from, 1, 10) = ? OR substr(m.valid_from, 6, 5) = ?)"
    assert params == ["2025-01-15", "07-04"]


def test_query_parts_splits_a_short_question_in_several_parts_only():
    assert query_parts("What did we say about Lady Gaga, and about Morgan Freeman?") == [
        "What did we say about Lady Gaga",
        "about Morgan Freeman?",
    ]
    assert query_parts("What are Ross and Rachel doing?") == []
    assert query_parts("Where, and when?") == []  # a part without a content word is no part
    assert query_parts(("The weather was grey, and the cat slept. " * 10).strip()) == []  # an email: chunks instead


def test_rrf_sums_reciprocal_ranks_over_the_rankings():
    fused = rrf([[1, 2, 3], [3, 1]], k=60)
    assert fused[1] == 1 / 61 + 1 / 62
    assert fused[3] == 1 / 63 + 1 / 61
    assert sorted(fused, key=lambda i: -fused[i]) == [1, 3, 2]


def _day(day: int) -> datetime:
    return datetime(2025, 3, day, 18, tzinfo=UTC)


def test_a_question_naming_a_day_finds_what_was_said_that_day(store: MemoryStore):
    # The same subject on three evenings; only the date tells them apart, and every memory carries a date.
    said = {
        3: "Bob: the garden party is moved indoors because of the rain forecast",
        10: "Bob: the garden party will have a barbecue and a band this year",
        17: "Bob: the garden party needs twenty more chairs from the church hall",
    }
    ids = store.add_many([
        NewMemory(ALICE, f"{_day(d):%A} {d} March 2025: {text}", type="context", valid_from=_day(d))
        for d, text in said.items()
    ])  # fmt: skip
    question = "What did Bob say about the garden party on Monday 10 March 2025?"
    shipped = hybrid_search(store, ALICE, question, k=3, touch=False)
    assert shipped[0].memory.id == ids[1]
    later = hybrid_search(store, ALICE, "What did Bob say about the garden party on 17 March?", k=3, touch=False)
    assert later[0].memory.id == ids[2]


def test_a_question_in_two_parts_finds_both(store: MemoryStore):
    facts = [
        "Alice's sister Maren moved to Bergen in the spring",
        "Alice's dentist is Dr. Okafor on Elm Street",
        "Alice plays the cello in a community orchestra",
        "Alice's landlord raised the rent by five percent",
        "Alice's bike was stolen outside the library",
        "Alice is learning Portuguese for a trip to Lisbon",
    ]
    ids = store.add_many([NewMemory(ALICE, f, type="fact") for f in facts])
    question = "Where does my sister live now, and who is my dentist?"
    hits = [h.memory.id for h in hybrid_search(store, ALICE, question, k=2, touch=False, recipe=SHIPPED)]
    assert set(hits) == {ids[0], ids[1]}


def test_rrf_gives_equal_scores_one_rank():
    fused = rrf([[(1, 0.9), (2, 0.9), (3, 0.5)], [(3, None), (2, None)]], k=60)
    assert fused[1] == 1 / 61
    assert fused[2] == 1 / 61 + 1 / 62
    assert fused[3] == 1 / 63 + 1 / 61
