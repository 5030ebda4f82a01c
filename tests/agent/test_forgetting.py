"""What "forget that …" reaches and what it keeps, and one fact per memory (issue 35): the pure text rules of
agent/forgetting.py and agent/facts.py, on the sentences the issue reproduced."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from quinn.agent import known, learning, state
from quinn.agent.facts import facts
from quinn.agent.forgetting import Forgetting, forget_by_id, noted, reach
from quinn.agent.memory_mail import forget, kept_reply
from quinn.agent.tools import MemoryChange
from quinn.db import Database
from quinn.documents.extract import extract
from quinn.documents.library import document_bytes, files_of, keep_documents
from quinn.mailbox.message import Attachment
from quinn.mailbox.outbox import Outbox
from quinn.memory import MemoryStore, Relation, graph_of, save_graph
from quinn.memory.passages import index_message
from tests.console.conftest import add_mail

MERGED = "Alice lives in Lisbon, has a dog called Biscuit and is allergic to peanuts."


@pytest.mark.parametrize(("request_", "text", "left"), [
    ("that I have a dog", MERGED, "Alice lives in Lisbon and is allergic to peanuts."),
    ("that I have a dog", "Alice has a dog called Biscuit, lives in Lisbon and is allergic to peanuts.",
     "Alice lives in Lisbon and is allergic to peanuts."),
    ("that I live in Berlin", "Alice prefers a weekend trip by train in Berlin and works as a pharmacist.",
     "Alice works as a pharmacist."),
    ("that I live in Berlin", 'Summary of the email thread "Weekend": Alice lives in Berlin and wants a lake.',
     'Summary of the email thread "Weekend": Alice wants a lake.'),
    ("that I live in Berlin", "Alice lives in Berlin.", ""),
    ("that I live in Berlin", "Alice is a pharmacist. She lives in Berlin.", "Alice is a pharmacist."),
])  # fmt: skip
def test_a_text_loses_the_fact_and_keeps_the_rest(request_: str, text: str, left: str) -> None:
    fact = Forgetting.of(request_)
    assert fact.mentions(text) and fact.without(text) == left


def test_a_text_that_does_not_mention_the_fact_is_left_alone() -> None:
    assert Forgetting.of("that I live in Berlin").rewrite("Alice likes lakes.") is None
    old_address = Forgetting.of("my old address")
    assert not old_address.mentions("Alice's email address is alice@example.org")  # "old" is missing
    assert old_address.mentions("Alice's old address was Rua 5")


def test_a_mail_loses_the_fact_and_keeps_its_layout() -> None:
    """A stored mail or reply (the thread buffer shows it to the model) is rewritten a paragraph at a time and a
    list an item at a time: what is left reads as it did; a paragraph left empty goes."""
    fact = Forgetting.of("that my brother Edda has just started a new job as a zookeeper")
    mail = ("Hi Quinn,\n\nI like green tea. My brother Edda has just started a new job\nas a zookeeper.\n\n"
            "Edda starts on Monday.\n\nThanks,\nAlice")  # fmt: skip
    assert fact.rewrite_mail(mail) == "Hi Quinn,\n\nI like green tea.\n\nThanks,\nAlice"
    reply = ("Done.\n\n---\nChanges to what I remember about you:\n- forgotten [memory:1]: My brother Edda has "
             "just started a new job as a zookeeper.\n- also taken out of: 2 passages of past mail")  # fmt: skip
    assert fact.rewrite_mail(reply) == ("Done.\n\n---\nChanges to what I remember about you:\n"
                                        "- also taken out of: 2 passages of past mail")  # fmt: skip
    assert fact.rewrite_mail("Hi Quinn,\n\nI like green tea.") is None


def test_the_kept_copy_of_a_reply_leaves_out_what_its_mail_forgot() -> None:
    """Quinn's reply to a forget lists the forgotten memory's words (and a model may repeat them): the person gets
    it so, the copy the conversation keeps does not have them; asked by number too ("forget 2")."""
    body = (
        "Done, Alice: I will not mention Edda's zookeeper job again. Enjoy the tea.\n\n---\nChanges to what I "
        "remember about you:\n- forgotten [memory:1]: My brother Edda has just started a new job as a zookeeper."
    )
    changes = [MemoryChange("forgotten", 1, "My brother Edda has just started a new job as a zookeeper.")]
    kept = kept_reply(body, [], "Please forget that my brother Edda has just started a new job as a zookeeper.",
                      "alice@example.org", "Alice")  # fmt: skip
    assert "zookeeper" not in kept and "Enjoy the tea." in kept
    assert "zookeeper" not in kept_reply(body, changes, "forget 2", "alice@example.org", "Alice")
    assert kept_reply(body, [], "What tea should I buy?", "alice@example.org") == body


@pytest.mark.parametrize(("merged", "split"), [
    (MERGED, ["Alice lives in Lisbon.", "Alice has a dog called Biscuit.", "Alice is allergic to peanuts."]),
    ("Alice lives in Lisbon and Bob lives in Porto.", ["Alice lives in Lisbon.", "Bob lives in Porto."]),
    ("Alice likes tea and coffee.", ["Alice likes tea and coffee."]),
    ("Alice works at Acme, a startup in Berlin.", ["Alice works at Acme, a startup in Berlin."]),
    ("Alice has two kids, Tom and Mia.", ["Alice has two kids, Tom and Mia."]),
    ("The meeting is on Monday, and the room is 4B.", ["The meeting is on Monday, and the room is 4B."]),
])  # fmt: skip
def test_one_fact_per_memory_splits_only_the_clear_case(merged: str, split: list[str]) -> None:
    assert facts(merged) == split


def test_the_persons_own_name_is_not_what_a_forget_is_about() -> None:
    memories = ["Alice lives in Berlin.", "Alice is a pharmacist.", "Alice likes lakes."]
    fact = Forgetting.of("that Alice lives in Berlin").beside(memories)
    assert fact.names == {"berlin"} and [m for m in memories if fact.mentions(m)] == ["Alice lives in Berlin."]


def written_from_berlin(store: MemoryStore, user: str, name: str, uid: int) -> int:
    """``name`` lives in Berlin, in a memory (its id returned) and in everything written from it: the
    short-term state, a thread's subject and summary, a passage of their mail and the graph; and works as a
    pharmacist, learnt from that mail (whose subject names Berlin)."""
    lives = store.add(user, f"{name} lives in Berlin.", type="fact")
    # Learnt from the mail below: its subject is shown beside the memory (digest answer, export).
    source = {"message_id": f"<berlin{uid}@example.org>", "subject": "Weekend in Berlin", "date": "2026-11-24"}
    store.add(user, f"{name} works as a pharmacist.", type="fact", metadata={"source": source})
    headers = (f"From: {user}\r\nTo: quinn@example.org\r\nSubject: Weekend in Berlin\r\n"
               f"Message-ID: <berlin{uid}@example.org>\r\n")  # fmt: skip
    raw = f"{headers}Date: Tue, 24 Nov 2026 10:00:00 +0000\r\n\r\nI live in Berlin now. I work at a pharmacy.\r\n"
    add_mail(store.db, uid, raw.encode(), user, "replied")
    assert index_message(store, user, f"<berlin{uid}@example.org>", "in") == 1
    store.db.execute("UPDATE sessions SET summary = ? WHERE user_id = ?",
                     (f"{name} lives in Berlin and wants a lake.", user))  # fmt: skip
    now = datetime.now(UTC)
    with store.db.transaction() as tx:
        state.update_user_state(tx, user, {"user_info": f"{name} lives in Berlin. {name} works as a pharmacist."}, now)
    save_graph(store, user, [(name, "person"), ("Berlin", "place")], [Relation(name, "lives in", "Berlin", lives)],
               now)  # fmt: skip
    # Quinn's reply, sent, whose raw copy the outbox keeps (until [retention] outbox_days).
    reply = f"From: quinn@example.org\r\nTo: {user}\r\nSubject: Re: Weekend\r\n\r\nEnjoy the lakes around Berlin!\r\n"
    outbox = Outbox(store.db)
    outbox.put(f"<reply{uid}@example.org>", f"<berlin{uid}@example.org>", user, None, [user], reply.encode())
    outbox.mark(f"<reply{uid}@example.org>", "sent")
    return lives


def berlin_rows(store: MemoryStore, user: str) -> dict[str, str]:
    """Where ``user``'s derived text still says Berlin, by table (what ``written_from_berlin`` wrote)."""
    sql = {
        "user_state": "SELECT user_info FROM user_state WHERE user_id = ?",
        "sessions": "SELECT subject || ' ' || subject_key || ' ' || summary FROM sessions WHERE user_id = ?",
        "memories": "SELECT json_extract(metadata, '$.source.subject') FROM memories WHERE user_id = ?",
        "passages": "SELECT subject || ' ' || content FROM passages WHERE user_id = ?",
        "messages": "SELECT subject || ' ' || body || ' ' || full_text FROM messages WHERE user_id = ?",
        "entities": "SELECT name FROM entities WHERE user_id = ?",
        "relationships": "SELECT r.relation, e.name FROM relationships r LEFT JOIN entities e ON e.id = r.target_id"
        " WHERE r.user_id = ?",
        "outbox": "SELECT CAST(raw AS TEXT) FROM outbox WHERE user_id = ?",
    }
    found = {where: repr(store.db.query(q, (user,))) for where, q in sql.items()}
    return {where: text for where, text in found.items() if "berlin" in text.lower()}


def test_what_do_you_know_about_me_names_every_entity_and_all_a_review_said(tmp_path: Path) -> None:
    """The map promises entities and reviews in the digest answer: an entity with no relation is one too, and a
    review's feedback and suggestion are words about the person as its summary is."""
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), None)
    try:
        now = datetime.now(UTC)
        save_graph(store, "alice@example.org", [("Dr. Moreau", "person")], [], now)
        with store.db.transaction() as tx:
            state.add_conversation_summary(tx, "s1", "alice@example.org", summary="Alice asked about her knee.",
                                           feedback_text="She was worried about the surgery.", reward_score=0.5,
                                           improvement_suggestion="Ask how the knee is doing.", prompt_version="v",
                                           now=now)  # fmt: skip
        said = known.described(known.shaping(store, "alice@example.org"))
        assert "- Dr. Moreau (person)" in said
        assert "- Alice asked about her knee. She was worried about the surgery. Ask how the knee is doing." in said
    finally:
        store.close()


def test_a_forget_reaches_the_subjects_a_merged_memory_lists_as_its_sources(tmp_path: Path) -> None:
    """Consolidation keeps each merged memory's source (``sources``), shown and exported beside the merge."""
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), None)
    try:
        sources = [{"message_id": "<a@x>", "subject": "Berlin marathon"}, {"message_id": "<b@x>", "subject": "Runs"}]
        merged = store.add("alice@example.org", "Alice runs on Tuesdays and Thursdays.", metadata={"sources": sources})
        done = reach(store, "alice@example.org", Forgetting.of("that I ran the Berlin marathon"), [])
        assert done.get("sources") == 1, done
        kept = store.get(merged)
        assert kept is not None and [s["subject"] for s in kept.metadata["sources"]] == ["", "Runs"]
    finally:
        store.close()


def test_a_forget_reaches_the_names_of_the_files_sent_their_headings_and_the_bytes_that_mention_it(
    tmp_path: Path,
) -> None:
    """A file's name is cited in recall ("[doc:IVF results.md p.1]") and listed in "what do you know about me?";
    its bytes cannot be rewritten. After "forget my IVF results": the name that says it becomes "attachment.md",
    the heading and text in recall lose it, the bytes of the files that mention it go, and a file that does not
    mention it keeps its name and bytes."""
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), None)
    alice = "alice@example.org"
    try:
        raw = (f"From: {alice}\r\nTo: quinn@example.org\r\nSubject: Papers\r\nMessage-ID: <files@example.org>\r\n"
               "Date: Tue, 24 Nov 2026 10:00:00 +0000\r\n\r\nTwo files for you.\r\n")  # fmt: skip
        add_mail(store.db, 1, raw.encode(), alice, "replied")
        files = {
            "IVF results.md": b"# Clinic letter\n\nThe IVF results came back in March.\n",
            "notes.md": b"# IVF results\n\nAsk about the next round.\n\n# Garden\n\nWater the roses.\n",
            "recipes.md": b"# Soup\n\nLeeks, potatoes, stock.\n",
        }
        sent = [Attachment(name, "text/markdown", len(data), data) for name, data in files.items()]
        read = [extract(a.filename, a.content_type, a.data, index=i) for i, a in enumerate(sent, start=1)]
        assert keep_documents(store, alice, "<files@example.org>", None, read, sent, max_file_bytes=1 << 20) >= 3
        ids = {n: d for n, d in store.db.query("SELECT name, document_id FROM message_documents WHERE user_id = ?",
                                               (alice,))}  # fmt: skip
        done = reach(store, alice, Forgetting.of("my IVF results"), [])
        assert done["files"] == 2, done  # the one named so, and the one whose text says so
        assert [f["name"] for f in files_of(store.db, alice)] == ["attachment.md", "notes.md", "recipes.md"]
        assert document_bytes(store.db, alice, ids["IVF results.md"]) is None
        assert document_bytes(store.db, alice, ids["notes.md"]) is None
        assert document_bytes(store.db, alice, ids["recipes.md"]) == files["recipes.md"]
        cited = store.db.query("SELECT document || ' ' || coalesce(ref, '') || ' ' || content FROM passages"
                               " WHERE user_id = ? AND document_id IS NOT NULL", (alice,))  # fmt: skip
        assert cited and not [c for (c,) in cited if "ivf" in c.lower()], cited
        assert any("Water the roses." in c for (c,) in cited) and any("Leeks" in c for (c,) in cited)
        assert "ivf" not in known.described(known.shaping(store, alice)).lower()
    finally:
        store.close()


def test_a_forget_by_id_reaches_what_was_written_from_the_memory(tmp_path: Path) -> None:
    """The model's tool, the console, the CLI and "forget 2" forget a memory by its id (``forget_by_id``): its
    fact leaves the state, summaries, passages and graph of that person, not their name nor other facts, and
    nobody else's."""
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), None)
    try:
        lives = written_from_berlin(store, "alice@example.org", "Alice", 1)
        written_from_berlin(store, "bob@example.org", "Bob", 2)
        assert set(berlin_rows(store, "alice@example.org")) == {
            "user_state",
            "sessions",
            "memories",
            "passages",
            "messages",
            "entities",
            "relationships",
            "outbox",
        }
        # A mail of hers still waiting to be learnt from (its extraction failed for a reason that passes).
        learning.put(store.db, "<later@example.org>", "alice@example.org", b"Subject: x\r\n\r\nBerlin is grey.", None)
        done = forget_by_id(store, lives, user_id="alice@example.org", reason="test")
        assert berlin_rows(store, "alice@example.org") == {}
        assert done["outbox"] == 1 and done["learning"] == 1, done  # the reply's copy, the mail still to learn from
        assert [f.names for f in noted(store.db, "<later@example.org>")] == [frozenset({"berlin"})]
        assert store.db.query("SELECT count(*) FROM relationships WHERE user_id = ?", ("alice@example.org",)) == [(0,)]
        assert set(done) >= {"user_state", "sessions", "sources", "passages", "messages", "graph"}, done
        # The memory learnt from that mail is kept; its source names the subject without Berlin.
        kept = store.db.query("SELECT metadata FROM memories WHERE user_id = ? AND content LIKE '%pharmacist%'",
                              ("alice@example.org",))  # fmt: skip
        assert [json.loads(m)["source"]["subject"] for (m,) in kept] == [""]
        assert store.db.query(
            "SELECT subject, subject_key FROM sessions WHERE user_id = ?", ("alice@example.org",)
        ) == [("", "")]
        said = known.described(known.shaping(store, "alice@example.org"))  # "what do you know about me?"
        assert "- Alice wants a lake." in said and "berlin" not in said.lower(), said
        # The stored mail keeps its other sentence, and its full-text index row follows it.
        assert store.db.query("SELECT body FROM messages WHERE user_id = ?", ("alice@example.org",)) == [
            ("I work at a pharmacy.",)
        ]
        fts = "SELECT m.user_id FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH ?"
        assert store.db.query(fts, ("berlin",)) == [("bob@example.org",)]
        assert sorted(store.db.query(fts, ("pharmacy",))) == [("alice@example.org",), ("bob@example.org",)]
        assert store.db.query("SELECT user_info FROM user_state WHERE user_id = ?", ("alice@example.org",)) == [
            ("Alice works as a pharmacist.",)
        ]
        assert [e["name"] for e in graph_of(store, "alice@example.org")["entities"]] == ["Alice"]
        sister = store.get(store.add("alice@example.org", "Alice's sister is called Jo.", type="fact"))
        assert sister is not None and Forgetting.of_memory(sister, []).names == {"jo"}  # her own name, alone too
        assert set(berlin_rows(store, "bob@example.org")) == {
            "user_state",
            "sessions",
            "memories",
            "passages",
            "messages",
            "entities",
            "relationships",
            "outbox",
        }
    finally:
        store.close()


def test_a_forget_reaches_the_earlier_value_and_the_mail_when_no_current_memory_holds_the_fact(tmp_path: Path) -> None:
    """The 1.5B pilot of issue 32: "forget that I grew up in Ericeira" after the memory had been replaced by small
    talk found no current memory, so nothing was scrubbed, while the replaced version and a passage of the mail
    still said it. The earlier value, the passage, the state and the summaries lose the fact all the same."""
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), None)
    try:
        lives = written_from_berlin(store, "alice@example.org", "Alice", 1)
        store.update(lives, "Alice spent Sunday repainting the hallway.", user_id="alice@example.org", reason="test")
        forgot = forget(store, "alice@example.org", "that I live in Berlin", True)
        assert forgot is not None and forgot.changes == []
        assert {"earlier", "passages", "messages", "user_state", "sessions"} <= set(forgot.elsewhere), forgot.elsewhere
        assert berlin_rows(store, "alice@example.org") == {}
        assert store.db.query("SELECT count(*) FROM memories WHERE user_id = ? AND active = 1 AND content LIKE "
                              "'%Berlin%'", ("alice@example.org",)) == [(0,)]  # fmt: skip
        assert forget(store, "alice@example.org", "that I keep bees", True) is None  # nothing holds it
    finally:
        store.close()


def test_what_a_mail_asked_to_forget_is_its_fact_not_the_persons_name() -> None:
    fact = Forgetting.of("that Alice lives in Berlin").besides_person("alice.smith@example.org", "Alice")
    assert fact.names == {"berlin"}
    assert fact.mentions("Alice moved to Berlin.") and not fact.mentions("Alice likes green tea.")


def test_cutting_a_text_by_clause_is_not_a_redos() -> None:
    """A sentence naming the forgotten fact with a long run of spaces in it (the person's own stored mail): the
    clause split tried "\\s*," at every space of the run (quadratic; 16,000 spaces 7 s, these ~2 min)."""
    text = "I like kafka" + " " * 60_000 + "x, and tea."
    started = time.monotonic()
    assert Forgetting.of("kafka").without(text) == "I tea." and facts(text)  # as with three spaces
    assert time.monotonic() - started < 5
