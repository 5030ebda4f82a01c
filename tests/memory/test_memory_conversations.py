"""The conversation legs of retrieval (issue 31): a reply is found through the line it answers and through its
conversation, the index follows every write, and nothing outside the filters comes in through it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from quinn.memory import MemoryStore, NewMemory
from quinn.memory.conversations import ConversationCache, conversation_of, terms_of
from quinn.memory.search import LINES, SHIPPED, hybrid_search, relevant

ALICE = "alice@example.test"
START = datetime(2026, 3, 2, 9, tzinfo=UTC)

# Other days' chat: many different lines, none about the boat; some share the answer's words.
TOPICS = ["football", "the lighthouse novel", "the bakery", "my sister's wedding", "the printer", "sourdough",
          "the quarterly report", "the neighbour's dog", "the garden fence", "the office party", "the new bike",
          "the piano lessons"]  # fmt: skip
CHATTER = [
    "Did you hear the news about {t}? I could not believe it.",
    "I have been thinking about {t} all week, honestly.",
    "Tom told me about {t} last year, same story as now.",
    "Can we talk about {t} when we meet on Saturday?",
    "The whole thing with {t} took far longer than planned.",
    "My mum keeps asking me about {t}, it is getting old.",
    "Same as last year, {t} is at Tom's.",
    "I wrote down everything about {t} in my notebook.",
]
# One day's thread: the question's words are in Bea's line, the answer (Alice's reply) shares none of them.
THREAD = [
    ("bea", "Where are you keeping the sailing boat over the winter months?"),
    ("alice", "At Tom's, same as last year."),
    ("bea", "Nice, say hi to him from me."),
]


def fill(store: MemoryStore, *, sessions: bool) -> dict[str, int]:
    """Twelve days of chatter, then the thread on its own day; returns text -> memory id of the thread."""
    rows = []
    for day in range(12):
        for n, line in enumerate(CHATTER):
            meta = {"source": {"session_id": f"chat-{day}"}} if sessions else {}
            text = f"{'bea' if n % 2 else 'alice'}: {line.format(t=TOPICS[day])}"
            rows.append(NewMemory(user_id=ALICE, content=text, type="context", scope="episodic",
                                  valid_from=START + timedelta(days=day + 1, minutes=n), metadata=meta))  # fmt: skip
    for n, (who, line) in enumerate(THREAD):
        meta = {"source": {"session_id": "boat"}} if sessions else {}
        rows.append(NewMemory(user_id=ALICE, content=f"{who}: {line}", type="context", scope="episodic",
                              valid_from=START + timedelta(minutes=n), metadata=meta))  # fmt: skip
    ids = store.add_many(rows)
    return {line: mid for mid, (_who, line) in zip(ids[-len(THREAD) :], THREAD, strict=True)}


def rank_of(store: MemoryStore, mid: int, query: str, **recipe: bool) -> int | None:
    hits = hybrid_search(store, ALICE, query, k=10, touch=False, recipe=replace(SHIPPED, **recipe))
    ids = [h.memory.id for h in hits]
    return ids.index(mid) + 1 if mid in ids else None


QUESTION = "Where is the sailing boat kept in winter?"


def test_the_reply_that_shares_no_word_with_the_question_is_found_through_its_conversation(store: MemoryStore):
    ids = fill(store, sessions=True)
    answer = ids[THREAD[1][1]]
    lines = hybrid_search(store, ALICE, QUESTION, k=10, touch=False, recipe=LINES)
    shipped = rank_of(store, answer, QUESTION)
    line_ranks = [h.memory.id for h in lines]
    assert shipped is not None and shipped <= 3
    # Each line on its own ranks it lower, or not at all: the conversation rankings are what lift it.
    assert answer not in line_ranks[:shipped]


def test_memories_without_a_session_are_grouped_by_their_day(store: MemoryStore):
    ids = fill(store, sessions=False)
    answer = ids[THREAD[1][1]]
    assert (rank_of(store, answer, QUESTION) or 99) <= 3
    assert conversation_of('{"source": {"session_id": "t1"}}', "2026-03-02T09:00:00+00:00") == "session:t1"
    assert conversation_of("{}", "2026-03-02T09:00:00+00:00") == "day:2026-03-02"
    assert conversation_of('{"source": {"session_id": "t1"}}', "2026-03-02T09", sessions=False) == "day:2026-03-02"
    assert conversation_of("not json", "2026-03-02T09:00:00+00:00") == "day:2026-03-02"
    assert terms_of("The boats were moving") == ["boat", "mov"]  # "were" is a stop word


def test_the_index_follows_forgets_and_new_memories(store: MemoryStore):
    ids = fill(store, sessions=True)
    answer, asked = ids[THREAD[1][1]], ids[THREAD[0][1]]
    index = store.conversations.index(store.db, ALICE)
    assert index.terms["session:boat"]["sail"] == 1
    # Forgetting the question line takes its words out of the conversation, and the neighbours leg loses it.
    store.forget(asked, reason="test")
    index = store.conversations.index(store.db, ALICE)
    assert index.terms["session:boat"]["sail"] == 0
    assert asked not in index.conversation
    hits = [h.memory.id for h in hybrid_search(store, ALICE, QUESTION, k=10, touch=False)]
    assert asked not in hits  # a forgotten memory never comes back through a conversation
    # A new line of the thread is appended without a rebuild of the rest.
    [new] = store.add_many([NewMemory(user_id=ALICE, content="alice: the sailing boat has a new blue sail",
                                      type="context", scope="episodic", valid_from=START + timedelta(minutes=5),
                                      metadata={"source": {"session_id": "boat"}})])  # fmt: skip
    again = store.conversations.index(store.db, ALICE)
    assert again is index and again.members["session:boat"][-1] == new and again.terms["session:boat"]["sail"] == 2
    assert answer in again.members["session:boat"]
    # A memory replaced by a new version and another moved to another day: filed again, not rebuilt, and the
    # result is what a fresh index of the same rows holds.
    chat = again.members["session:chat-3"][0]
    store.update(chat, "alice: the sailing club meets on Tuesdays", reason="test")
    store.db.execute("UPDATE memories SET metadata = '{}' WHERE id = ?", (again.members["session:chat-4"][0],))
    moved = store.conversations.index(store.db, ALICE)
    fresh = ConversationCache().index(store.db, ALICE)
    assert moved is again and chat not in moved.conversation
    assert moved.members == fresh.members and moved.conversation == fresh.conversation
    assert {k: +v for k, v in moved.terms.items()} == fresh.terms and moved.lengths == fresh.lengths
    assert +moved.frequency == fresh.frequency


def test_conversation_rankings_bring_nothing_the_filters_keep_out(store: MemoryStore):
    ids = fill(store, sessions=True)
    answer = ids[THREAD[1][1]]
    # The filter keeps only facts: the thread's lines are context, so none may come in through the conversation.
    hits = hybrid_search(store, ALICE, QUESTION, k=10, touch=False, type="fact")
    assert hits == []
    other = "bob@example.test"
    assert hybrid_search(store, other, QUESTION, k=10, touch=False) == []
    assert answer in [h.memory.id for h in hybrid_search(store, ALICE, QUESTION, k=10, touch=False)]
    # A purge drops the user's index with the rows.
    store.purge(ALICE)
    assert not [key for key in store.conversations._entries if key[0] == ALICE]
    assert hybrid_search(store, ALICE, QUESTION, k=10, touch=False) == []


def test_relevance_cutoff_keeps_a_worded_hit_or_a_close_one():
    assert relevant(True, 0.0, 0.5) and relevant(True, None, 0.9)  # a word of the query found it
    assert relevant(False, 0.6, 0.5) and not relevant(False, 0.4, 0.5) and not relevant(False, None, 0.1)
    assert relevant(False, None, 0.0) and relevant(False, -0.01, 0.0)  # 0 keeps every hit


def test_hits_say_whether_a_word_of_the_query_found_them(store: MemoryStore):
    ids = fill(store, sessions=True)
    hits = {h.memory.id: h for h in hybrid_search(store, ALICE, QUESTION, k=10, touch=False)}
    assert hits[ids[THREAD[0][1]]].worded  # "sailing boat ... winter" is in it
    assert hits[ids[THREAD[1][1]]].worded  # in the line before it: its neighbour
    assert not hits[ids[THREAD[1][1]]].bm25_rank
