"""Numbered migrations, applied at open: each one from the version before it, with data in the database."""

from __future__ import annotations

import re

import numpy as np
import pytest

from quinn.db import Database, migration_scripts, split_statements
from quinn.errors import StoreError
from quinn.memory.embed import LocalEmbedder
from quinn.memory.rows import insert_rows
from quinn.memory.store import MemoryStore

ALICE = "alice@example.test"
LATEST = migration_scripts()[-1][0]


def test_migrations_are_numbered_from_one():
    assert [v for v, _ in migration_scripts()] == list(range(1, LATEST + 1))
    assert LATEST >= 2


@pytest.mark.parametrize("version", range(1, LATEST + 1))
def test_each_migration_applies_to_the_version_before(database_url: str, version: int):
    db = Database.open(database_url, migrate=False)
    try:
        assert db.migrate(target=version - 1) == version - 1
        assert db.migrate(target=version) == version
        assert db.query_value("PRAGMA user_version") == version
        assert db.migrate() == LATEST
        assert db.migrate() == LATEST  # idempotent: nothing newer to apply
    finally:
        db.close()


def _v1_row(db: Database, content: str, vector: np.ndarray, *, valid_from: str, version: int = 1,
            root_id: int | None = None) -> int:  # fmt: skip
    """A memory row exactly as the version-1 store wrote it (no uid, no content_format)."""
    with db.transaction() as tx:
        mid = tx.execute(
            "INSERT INTO memories (user_id, scope, domain, type, content, tags, metadata, importance, created_at,"
            " updated_at, version, root_id, valid_from, embedding, embedding_model, schema_version)"
            " VALUES (?, 'domain', 'work', 'fact', ?, '[\"work\"]', '{\"source\": \"v1\"}', 0.6, ?, ?, ?, ?, ?, ?,"
            " 'local/all-MiniLM-L6-v2', 1)",
            (ALICE, content, valid_from, valid_from, version, root_id, valid_from, vector.tobytes()),
        )
        if root_id is None:
            tx.execute("UPDATE memories SET root_id = ? WHERE id = ?", (mid, mid))
        tx.execute(
            "INSERT INTO memory_versions (memory_id, root_id, user_id, version, change, content, changed_at)"
            " VALUES (?, ?, ?, ?, 'created', ?, ?)",
            (mid, root_id or mid, ALICE, version, content, valid_from),
        )
    return mid


def test_version_1_with_data_migrates_to_2(database_url: str, embedder: LocalEmbedder):
    db = Database.open(database_url, migrate=False)
    assert db.migrate(target=1) == 1
    texts = ["Project Alpha deadline is June 30", "Project Alpha deadline moved to July 15", "Alice uses Linux"]
    vectors = embedder.embed(texts)
    old = _v1_row(db, texts[0], vectors[0], valid_from="2026-05-01T00:00:00+00:00")
    new = _v1_row(db, texts[1], vectors[1], valid_from="2026-06-10T00:00:00+00:00", version=2, root_id=old)
    db.execute("UPDATE memories SET valid_to = ?, superseded_by = ? WHERE id = ?", ("2026-06-10T00:00:00+00:00",
               new, old))  # fmt: skip
    linux = _v1_row(db, texts[2], vectors[2], valid_from="2026-04-01T00:00:00+00:00")
    db.execute("INSERT INTO sessions (id, user_id, created_at, last_message_at) VALUES ('s1', ?, 'x', 'x')", (ALICE,))
    db.close()

    store = MemoryStore.open(database_url, embedder=embedder)  # open migrates
    try:
        assert store.db.query_value("PRAGMA user_version") == LATEST
        uids = [r[0] for r in store.db.query("SELECT uid FROM memories ORDER BY id")]
        assert len(uids) == len(set(uids)) == 3 and all(re.fullmatch(r"[0-9a-f]{32}", u) for u in uids)
        assert {r[0] for r in store.db.query("SELECT content_format FROM memories")} == {"text"}
        assert store.db.query_value("SELECT count(*) FROM sessions") == 1  # other tables keep their rows
        # The old rows work with the new code: reads, versions, vector and full-text search, updates.
        assert [m.id for m in store.get_all(ALICE)] == [new, linux]
        assert [m.content for m in store.history(old)] == texts[:2]
        hits = store.search(ALICE, "When is the Project Alpha deadline?", k=2)
        assert hits[0].id == new and hits[0].vector_similarity is not None and hits[0].bm25_rank == 1
        newest = store.update(linux, "Alice uses Linux and FreeBSD", user_id=ALICE)
        assert store.get(newest).version == 2  # type: ignore[union-attr]
        assert [h.id for h in store.search(ALICE, "FreeBSD", k=1)] == [newest]
        assert store.export(ALICE).count('"uid"') == 4
    finally:
        store.close()


def test_version_2_with_data_migrates_to_3(database_url: str, embedder: LocalEmbedder):
    db = Database.open(database_url, migrate=False)
    assert db.migrate(target=2) == 2
    texts = ["Alice keeps bees", "Alice rides a bike"]
    vectors = embedder.embed(texts)
    rows = [
        {"user_id": ALICE, "scope": "profile", "domain": None, "type": "fact", "content": text,
         "content_format": "text", "tags": "[]", "metadata": "{}", "importance": 0.5,
         "created_at": "2026-05-01T00:00:00+00:00", "updated_at": "2026-05-01T00:00:00+00:00",
         "valid_from": "2026-05-01T00:00:00+00:00", "expires_at": None, "embedding": vector.tobytes(),
         "embedding_model": embedder.model_id}
        for text, vector in zip(texts, vectors, strict=True)
    ]  # fmt: skip
    with db.transaction() as tx:
        bees, bike = insert_rows(tx, rows)
        tx.execute("UPDATE memories SET root_id = id")
    db.close()

    store = MemoryStore.open(database_url, embedder=embedder)
    try:
        assert store.db.query_value("PRAGMA user_version") == LATEST
        assert store.db.query_one("SELECT inserts, changes FROM memory_vector_stamp") == (0, 0)
        assert store.search(ALICE, "beekeeping", k=1)[0].id == bees  # the old rows are cached and found
        store.db.execute("UPDATE memories SET embedding = ? WHERE id = ?", (vectors[0].tobytes(), bike))
        assert store.db.query_one("SELECT inserts, changes FROM memory_vector_stamp") == (0, 1)  # triggers work
        store.add(ALICE, "Alice likes honey")
        assert store.db.query_one("SELECT inserts, changes FROM memory_vector_stamp") == (1, 1)
        # The changed vector is seen: "bike" now carries the bees vector, so both match a bee question alike.
        by_id = {h.id: h for h in store.search(ALICE, "beekeeping", k=3)}
        assert by_id[bike].vector_similarity == pytest.approx(by_id[bees].vector_similarity, abs=1e-5)
    finally:
        store.close()


def test_version_5_with_data_migrates_to_6(database_url: str):
    db = Database.open(database_url, migrate=False)
    assert db.migrate(target=5) == 5
    when = "2026-05-01T00:00:00+00:00"
    rows = [
        {"user_id": user, "scope": "profile" if user else "global", "domain": None, "type": "fact", "content": text,
         "content_format": "text", "tags": "[]", "metadata": "{}", "importance": 0.5, "created_at": when,
         "updated_at": when, "valid_from": when, "expires_at": None, "embedding": None, "embedding_model": None}
        for user, text in ((ALICE, "Alice plans a Zanzibar trip"), ("bob@example.test", "Bob went to Zanzibar"),
                           (None, "Zanzibar ferries run hourly"))
    ]  # fmt: skip
    with db.transaction() as tx:
        alice, _bob, everyone = insert_rows(tx, rows)
        tx.execute("UPDATE memories SET root_id = id")
    db.close()

    store = MemoryStore.open(database_url, embedder=None)  # full-text only: the index under test
    try:
        assert store.db.query_value("PRAGMA user_version") == LATEST
        # The old rows are in the rebuilt index, each under its owner's token.
        assert store.db.query_value("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH 'zanzibar'") == 3
        assert [h.memory.id for h in store.search(ALICE, "Zanzibar", k=5)] == [alice]
        assert {h.memory.id for h in store.search(ALICE, "Zanzibar", k=5, include_global=True)} == {alice, everyone}
        # The triggers keep the index in step: an update re-indexes the row under the same owner.
        newest = store.update(alice, "Alice flies to Lisbon", user_id=ALICE)
        assert [h.memory.id for h in store.search(ALICE, "Lisbon", k=5)] == [newest]
        assert [h.memory.id for h in store.search("bob@example.test", "Lisbon", k=5)] == []
        store.db.execute("INSERT INTO memories_fts (memories_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        store.close()


def test_split_statements_keeps_trigger_bodies_whole_and_drops_comments():
    script = (
        "-- a comment; with a semicolon\n"
        "CREATE TABLE t (x);\n\n"
        "CREATE TRIGGER t_ai AFTER INSERT ON t BEGIN\n    INSERT INTO t (x) VALUES (1);\n    SELECT 2;\nEND;\n"
        "PRAGMA user_version = 3; SELECT ';' AS semicolon;\n-- trailing comment\n"
    )
    statements = split_statements(script)
    assert [s.split()[0:2] for s in statements] == [
        ["--", "a"], ["CREATE", "TRIGGER"], ["PRAGMA", "user_version"], ["SELECT", "';'"]
    ]  # fmt: skip
    assert statements[0].endswith("CREATE TABLE t (x);") and statements[1].endswith("END;")
    assert sum(len(split_statements(sql)) for _v, sql in migration_scripts()) > 30  # the shipped scripts split too
    with pytest.raises(StoreError, match="ends inside a statement"):
        split_statements("CREATE TABLE t (x);\nCREATE TABLE u (y)")


def test_a_failing_migration_leaves_nothing_behind(database_url: str, monkeypatch: pytest.MonkeyPatch):
    Database.open(database_url).close()
    broken = (LATEST + 1, "CREATE TABLE half_done (x);\nINSERT INTO half_done VALUES (1);\nSELECT nope FROM missing;")
    monkeypatch.setattr("quinn.db.schema.migration_scripts", lambda: [*migration_scripts(), broken])
    with pytest.raises(StoreError, match=f"migration {LATEST + 1:04d} failed: .*missing") as caught:
        Database.open(database_url)
    assert "nothing of it was applied" in str(caught.value.hint)
    monkeypatch.undo()
    db = Database.open(database_url)
    try:
        assert db.query_value("PRAGMA user_version") == LATEST
        assert db.query_value("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'") == 0
    finally:
        db.close()


def test_version_12_with_passages_migrates_to_13(database_url: str):
    """Migration 0013 adds the file columns to passages: a passage of a mail stored before it reads back as a
    mail's, is found by search, and keeps its citation."""
    from quinn.memory.passages import index_message, search_passages

    db = Database.open(database_url, migrate=False)
    assert db.migrate(target=12) == 12
    when = "2026-05-01T00:00:00+00:00"
    db.execute("INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr, to_addrs,"
               " sent_at, body, full_text, created_at) VALUES ('s1', ?, 'in', '<m1@x>', 'Boat', ?, '[]', ?,"
               " 'The mooring fee for the boat is 40 euros.', '', ?)", (ALICE, ALICE, when, when))  # fmt: skip
    db.execute("INSERT INTO passages (user_id, message_row, message_id, direction, sent_at, subject, position,"
               " content, audience, created_at) VALUES (?, 1, '<m1@x>', 'in', ?, 'Boat', 0,"
               " 'The mooring fee for the boat is 40 euros.', ?, ?)", (ALICE, when, f'["{ALICE}"]', when))  # fmt: skip
    db.close()

    store = MemoryStore.open(database_url, embedder=None)
    try:
        assert store.db.query_value("PRAGMA user_version") == LATEST
        [hit] = search_passages(store, ALICE, "mooring fee")
        assert (hit.passage.document, hit.passage.ref, hit.passage.citation) == ("", "", "[mail:2026-05-01]")
        assert index_message(store, ALICE, "<m1@x>", "in") == 0  # already indexed before the migration
        assert store.db.query("SELECT count(*) FROM documents") == [(0,)]
    finally:
        store.close()


def test_version_22_with_improvement_runs_migrates_to_23(database_url: str):
    """Migration 0023 (issue 35) drops the review suggestions the improvement job copied into its run log, keeps
    the figures, and leaves other jobs' counts alone."""
    import json

    db = Database.open(database_url, migrate=False)
    try:
        assert db.migrate(target=22) == 22
        versions = [{"prompt_version": "reply@a", "conversations": 3, "suggestions": ["Alice hates long mails."]},
                    {"prompt_version": "reply@b", "conversations": 1, "suggestions": []}]  # fmt: skip
        db.execute("INSERT INTO job_runs (job, started_at, status, counts) VALUES ('improvement', 't', 'ok', ?)",
                   (json.dumps({"processed": 4, "details": {"versions": versions, "holder": "me"}}),))  # fmt: skip
        db.execute("INSERT INTO job_runs (job, started_at, status, counts) VALUES ('decay', 't', 'ok', ?)",
                   (json.dumps({"details": {"versions": [{"suggestions": ["kept"]}]}}),))  # fmt: skip
        assert db.migrate(target=23) == 23
        improvement, decay = (json.loads(r[0]) for r in db.query("SELECT counts FROM job_runs ORDER BY id"))
        assert improvement == {
            "processed": 4,
            "details": {
                "holder": "me",
                "versions": [
                    {"prompt_version": "reply@a", "conversations": 3},
                    {"prompt_version": "reply@b", "conversations": 1},
                ],
            },
        }
        assert decay["details"]["versions"] == [{"suggestions": ["kept"]}]
    finally:
        db.close()
