"""Memory over time in the store (issue 32), on a file and on sqld: the version a memory replaced, and a person's
whole past mail when it fits."""

from __future__ import annotations

from quinn.memory import earlier_versions, whole_history
from quinn.memory.models import NewMemory
from quinn.memory.store import MemoryStore
from tests.memory.test_memory_passages import ALICE, BOB, store_message


def test_the_version_a_memory_replaced_is_handed_with_it_but_not_a_consolidations_nor_a_forgotten_one(
    store: MemoryStore,
) -> None:
    lisbon = store.add(ALICE, "Alice lives in Lisbon.", valid_from="2026-01-01T00:00:00+00:00")
    porto = store.update(lisbon, "Alice lives in Porto.", user_id=ALICE, valid_from="2026-05-01T08:00:00+00:00")
    braga = store.update(porto, "Alice lives in Braga.", user_id=ALICE, valid_from="2026-09-01T08:00:00+00:00")
    tea, coffee = store.add(ALICE, "Alice drinks tea."), store.add(ALICE, "Alice drinks coffee.")
    merged = store.supersede([tea, coffee], NewMemory(ALICE, "Alice drinks tea and coffee."))
    single = store.add(ALICE, "Alice has a cat.")
    current = {m.id: m for m in store.get_all(ALICE)}
    assert set(current) == {braga, merged, single}
    found = earlier_versions(store.db, list(current.values()))
    # One earlier version: the one right before (Porto, closed when Braga began), never older ones.
    assert list(found) == [braga] and found[braga].id == porto
    assert found[braga].valid_to == "2026-09-01T08:00:00+00:00" and found[braga].content == "Alice lives in Porto."
    assert earlier_versions(store.db, []) == {}


def test_the_whole_history_is_handed_oldest_first_only_when_it_fits_and_only_what_recall_may_show(
    store: MemoryStore,
) -> None:
    store_message(store, ALICE, "<b@x>", "We adopted a cat.", sent_at="2026-02-10T09:00:00+00:00")
    store_message(store, ALICE, "<a@x>", "I started at Acme.", sent_at="2026-01-05T09:00:00+00:00")
    store_message(store, ALICE, "<c@x>", "Salary talk with Bob.", sent_at="2026-03-01T09:00:00+00:00",
                  to=("quinn@example.org", BOB))  # fmt: skip
    store_message(store, BOB, "<z@x>", "Bob's own mail.")
    history = whole_history(store.db, ALICE, 10_000)
    assert history is not None
    assert [(p.message_id, p.sent_at[:10], p.content) for p in history] == [
        ("<a@x>", "2026-01-05", "I started at Acme."), ("<b@x>", "2026-02-10", "We adopted a cat."),
        ("<c@x>", "2026-03-01", "Salary talk with Bob."),
    ]  # fmt: skip
    assert whole_history(store.db, ALICE, 40) is None  # 57 characters do not fit 40: recall retrieves instead
    assert [p.message_id for p in whole_history(store.db, ALICE, 10_000, others=[BOB]) or []] == ["<c@x>"]
    assert [p.message_id for p in whole_history(store.db, ALICE, 10_000, exclude_message_ids=["<a@x>", "<c@x>"])
            or []] == ["<b@x>"]  # fmt: skip
    # A mail whose memory was forgotten is retracted from the history as from recall.
    [cat] = store.add_many([NewMemory(ALICE, "Alice has a cat.", metadata={"source": {"message_id": "<b@x>"}})])
    store.forget(cat, user_id=ALICE)
    assert "<b@x>" not in [p.message_id for p in whole_history(store.db, ALICE, 10_000) or []]
    assert whole_history(store.db, "carol@example.org", 10_000) is None


def test_a_forget_reaches_a_value_that_survives_only_as_the_earlier_version(store: MemoryStore) -> None:
    """ "Forget that I lived in Lisbon" after a move: Lisbon is no current memory, only Porto's earlier value, which
    recall shows as "earlier: … (until DATE)". The forget must reach it, or the forgotten value comes back there."""
    from quinn.agent.forgetting import Forgetting, reach

    lisbon = store.add(ALICE, "Alice lives in Lisbon.", valid_from="2026-01-01T00:00:00+00:00")
    porto = store.update(lisbon, "Alice moved to Porto.", user_id=ALICE, valid_from="2026-05-01T08:00:00+00:00")
    bob_lisbon = store.add(BOB, "Bob lives in Lisbon.")
    bob_porto = store.update(bob_lisbon, "Bob moved to Porto.", user_id=BOB)
    [current] = store.get_all(ALICE)
    assert earlier_versions(store.db, [current])[porto].content == "Alice lives in Lisbon."
    done = reach(store, ALICE, Forgetting.of("that I lived in Lisbon"), [])
    assert done.get("earlier") == 1
    assert earlier_versions(store.db, store.get_all(ALICE)) == {}
    assert [m.content for m in store.get_all(ALICE)] == ["Alice moved to Porto."]  # the current value stays
    # Bob's earlier value is his, untouched.
    assert earlier_versions(store.db, store.get_all(BOB))[bob_porto].content == "Bob lives in Lisbon."


def test_the_whole_history_is_the_text_recall_would_show_each_mail_once_without_the_passages_overlaps(
    store: MemoryStore,
) -> None:
    """A long mail is stored as overlapping passages; the whole history gives it back once, in order. It is built
    from the passages, not the stored body, so what a forget took out of them (or a mask) stays out."""
    sentences = [f"On day {i} Alice walked {i} kilometres along the river with her sister." for i in range(60)]
    store_message(store, ALICE, "<long@x>", " ".join(sentences), sent_at="2026-02-10T09:00:00+00:00")
    stored = store.db.query("SELECT count(*) FROM passages WHERE message_id = '<long@x>'")[0][0]
    assert stored > 2  # several overlapping passages
    [mail] = whole_history(store.db, ALICE, 100_000) or []
    assert mail.content == " ".join(sentences)
    store.db.execute("UPDATE passages SET content = replace(content, 'river', 'canal') WHERE message_id = '<long@x>'")
    [mail] = whole_history(store.db, ALICE, 100_000) or []
    assert "river" not in mail.content and mail.content.count("canal") == 60
