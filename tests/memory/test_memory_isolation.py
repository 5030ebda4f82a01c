"""Acceptance: users only ever see their own memory, and a purge leaves no trace of the user in the file."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from quinn.agent.context import context_block
from quinn.agent.purge import purge
from quinn.config import DocumentsConfig
from quinn.documents.knowledge import add_file
from quinn.memory import MemoryStore, NewMemory
from quinn.memory.embed import LocalEmbedder, RecentEmbeddings
from quinn.memory.passages import KNOWLEDGE_OWNER, index_message, search_passages, stored_message, write_passages

SHARED = [
    "prefers tea over coffee in the morning", "is training for a half marathon in spring",
    "works on Project Alpha with a deadline in July", "has a dog called Pixel", "is allergic to peanuts",
    "likes short replies without small talk", "is learning Portuguese for a trip to Lisbon",
    "plays the cello in an amateur orchestra", "moved to a flat near the river", "prefers meetings after 10am",
    "uses Linux at home and a Mac at work", "is saving for an electric bike", "volunteers at the food bank",
    "reads crime novels on the train", "plans a birthday party for their sister", "keeps bees in the garden",
]  # fmt: skip
TYPES = ["fact", "preference", "goal", "personal", "context"]
SCOPES = ["profile", "domain", "episodic"]


class RememberingEmbedder:
    """The real model, with the query vectors it already computed kept: 1,000 queries reuse ~150 texts."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner, self.model_id, self.dim = inner, inner.model_id, inner.dim
        self._known: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._known]
        if missing:
            self._known.update(zip(missing, self.inner.embed(missing), strict=True))
        return np.stack([self._known[t] for t in texts]).astype(np.float32)


def _populate(store: MemoryStore, rng: random.Random, users: list[str]) -> dict[str, set[int]]:
    items: list[NewMemory] = []
    for index, user in enumerate(users):
        marker = f"marker{index:02d}x"
        for sentence in rng.sample(SHARED, 8):  # overlapping: every sentence belongs to many users
            items.append(NewMemory(user, f"The user {sentence}", scope=rng.choice(SCOPES), type=rng.choice(TYPES),
                                   domain=rng.choice([None, "work", "home"]), tags=tuple(rng.sample(
                                       ["work", "health", "travel", "family"], 2)), importance=rng.random(),
                                   valid_from=f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"))  # fmt: skip
        items.append(NewMemory(user, f"Secret code {marker} belongs to {user}", type="personal"))
    ids = store.add_many(items)
    owner: dict[str, set[int]] = {user: set() for user in users}
    for item, mid in zip(items, ids, strict=True):
        owner[str(item.user_id)].add(mid)
    # Versions and forgotten rows too: history must stay as private as what is current.
    for user in users[:10]:
        mid = min(owner[user])
        owner[user].add(store.update(mid, f"The user {rng.choice(SHARED)} (updated)", user_id=user))
        store.forget(max(owner[user] - {mid}), user_id=user)
    store.add(None, "Quinn answers in the user's language", scope="global", type="persona")
    return owner


@pytest.mark.heavy  # ~15 s in process
def test_two_addresses_apart_only_by_the_case_of_a_non_ascii_letter_are_two_people(store: MemoryStore):
    """Only ASCII letters are folded in an address (``canonical_address``; a mailbox's other letters are its own:
    SMTPUTF8 providers may give "Àlice@" and "àlice@" to two people). The store folded every letter, so an
    authenticated "Àlice@" read all of "àlice@"'s memory, private memories and past mail included."""
    from quinn.mailbox.identity import canonical_address

    lower, upper = "àlice@example.org", canonical_address("Àlice@Example.ORG")
    assert upper == "Àlice@example.org"
    kept = store.add(lower, "àlice's diagnosis came back clear.", type="personal")
    store_message_for(store, lower, "<l@x>", "My diagnosis came back clear.")
    assert store.get_all(upper) == [] and store.search(upper, "diagnosis", k=5) == []
    assert search_passages(store, upper, "diagnosis") == []
    assert [m.id for m in store.get_all(lower)] == [kept]
    assert [m.id for m in store.get_all("  àlice@EXAMPLE.org ")] == [kept]  # ASCII case and spaces still fold


def store_message_for(store: MemoryStore, user: str, message_id: str, body: str) -> None:
    """A row of ``messages`` for ``user``, indexed for recall."""
    store.db.execute(
        "INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr, to_addrs, sent_at,"
        " body, full_text, created_at) VALUES ('s', ?, 'in', ?, 'Hi', ?, '[]', '2026-03-14T09:00:00+00:00', ?, ?,"
        " '2026-03-14T09:00:00+00:00')",
        (user, message_id, user, body, body),
    )
    assert index_message(store, user, message_id, "in") == 1


def test_fifty_users_never_see_each_other(database_url: str, embedder: LocalEmbedder):
    """1,000 randomized searches, get_all calls and memory blocks: only the asking user's memories come back."""
    rng = random.Random(7)
    users = [f"user{i:02d}@example.test" for i in range(50)]
    store = MemoryStore.open(database_url, embedder=RememberingEmbedder(embedder))  # type: ignore[arg-type]
    try:
        owner = _populate(store, rng, users)
        queries = [f"Does the user {s}?" for s in SHARED] + [f"Secret code marker{i:02d}x" for i in range(50)]
        filter_choices = [
            {}, {"scope": "profile"}, {"type": "personal"}, {"domain": "work"}, {"tags": ["health", "travel"]},
            {"tags": ["work", "family"], "tags_mode": "all"}, {"since": "2026-03-01"}, {"until": "2026-06-01"},
            {"min_importance": 0.5}, {"include_inactive": True}, {"as_of": "2026-05-01"}, {"include_global": True},
        ]  # fmt: skip
        checked = {"search": 0, "get_all": 0, "context_block": 0, "hits": 0}
        for _ in range(1000):
            user = rng.choice(users)
            filters = dict(rng.choice(filter_choices))
            allowed = owner[user] | ({m.id for m in store.get_all(None)} if filters.get("include_global") else set())
            hits = store.search(user, rng.choice(queries), k=rng.randint(1, 25), **filters)
            assert {h.id for h in hits} <= allowed, (user, filters)
            block = context_block(hits, token_budget=rng.choice([50, 400, 5000]))
            assert {int(i) for i in re.findall(r"\[memory:(\d+)\]", block)} <= allowed
            assert not re.search(r"marker(\d\d)x", block.replace(f"marker{users.index(user):02d}x", ""))
            listed = store.get_all(user, **filters)
            assert {m.id for m in listed} <= allowed
            checked["search"] += 1
            checked["get_all"] += 1
            checked["context_block"] += 1
            checked["hits"] += len(hits)
        assert checked["hits"] > 3000  # the queries did find things: an empty answer would prove nothing
        # Another user's marker, asked for directly, is never found (full-text would match it at once).
        for index, user in enumerate(users):
            other = (index + 1) % len(users)
            hits = store.search(user, f"Secret code marker{other:02d}x", k=50, include_inactive=True)
            assert all(f"marker{other:02d}x" not in h.content for h in hits)
            assert any(f"marker{index:02d}x" in h.content for h in store.search(user, f"marker{index:02d}x", k=3))
    finally:
        store.close()


def _plant(store: MemoryStore, user: str, marker: str, uid: int) -> None:
    """Every kind of row that names the user: memories (with versions), messages, state, graph, outbox, ..."""
    mid = store.add(user, f"{marker} first version about the flat", type="fact", metadata={"note": f"{marker}meta"})
    store.update(mid, f"{marker} second version about the flat", user_id=user)
    store.forget(store.add(user, f"{marker} forgotten detail"), user_id=user)
    db, t = store.db, "2026-11-01T10:00:00+00:00"
    with db.transaction() as tx:
        sid = f"session-{marker}"
        tx.execute(
            "INSERT INTO sessions (id, user_id, subject, created_at, last_message_at, summary)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (sid, user, f"{marker} subject", t, t, f"{marker} summary"),
        )
        tx.execute("INSERT INTO session_ids (message_id, session_id) VALUES (?, ?)", (f"<{marker}@x>", sid))
        tx.execute(
            "INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr, sent_at,"
            " body, full_text, created_at) VALUES (?, ?, 'in', ?, ?, ?, ?, ?, ?, ?)",
            (sid, user, f"<{marker}@x>", f"{marker} subject", user, t, f"{marker} body text", f"{marker} full text", t),
        )
        tx.execute(
            "INSERT INTO user_state (user_id, user_info, updated_at) VALUES (?, ?, ?)", (user, f"{marker} user info", t)
        )
        review = tx.execute(
            "INSERT INTO conversation_summaries (session_id, user_id, summary, improvement_suggestion, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (sid, user, f"{marker} conversation summary", f"{marker} suggestion", t),
        )
        tx.execute(  # a proposal the improvement job drew from the review (issue 35), quoting it
            "INSERT INTO prompt_proposals (name, base_version, source, rationale, evidence, created_at)"
            " VALUES ('reply', ?, 'text', ?, ?, ?)",
            (f"reply@{uid}", f"answers {marker} suggestion", f'{{"reviews": [{review}]}}', t),
        )
        tx.execute(
            "INSERT INTO entities (user_id, name, kind, created_at) VALUES (?, ?, 'person', ?)",
            (user, f"{marker} entity", t),
        )
        tx.execute(
            "INSERT INTO relationships (user_id, source_id, relation, target_id, created_at) VALUES (?, 1, ?, 1, ?)",
            (user, f"{marker} relation", t),
        )
        tx.execute(
            "INSERT INTO outbox (message_id, in_reply_to, user_id, session_id, recipients, raw, state,"
            " created_at) VALUES (?, ?, ?, ?, ?, ?, 'sent', ?)",
            (
                f"<reply-{marker}@x>",
                f"<{marker}@x>",
                user,
                sid,
                f'["{user}"]',
                f"To: {user}\\r\\n\\r\\n{marker} reply".encode(),
                t,
            ),
        )
        tx.execute(
            "INSERT INTO llm_usage (at, model, purpose, user_id, message_id) VALUES (?, 'm', 'reply', ?, ?)",
            (t, user, f"<{marker}@x>"),
        )
        tx.execute("INSERT INTO mail_state (folder, uidvalidity, uid, message_id, state, user_id, session_id,"
                   " thread_key, received_at, updated_at) VALUES ('INBOX', 1, ?, ?, 'replied', ?, ?, ?, ?, ?)",
                   (uid, f"<{marker}@x>", user, sid, f"<{marker}root@x>", t, t))  # fmt: skip
        tx.execute("INSERT INTO memory_retrievals (memory_id, session_id, at) VALUES (?, ?, ?)", (mid, sid, t))
        tx.execute("INSERT INTO learning_queue (message_id, user_id, raw, created_at) VALUES (?, ?, ?, ?)",
                   (f"<{marker}-queued@x>", user, f"Subject: {marker} queued\r\n\r\nbody".encode(), t))  # fmt: skip
        tx.execute("INSERT INTO audit_log (at, actor, action, object, user_id, detail) VALUES (?, 'root', 'edit',"
                   " ?, ?, ?)", (t, f"memory {mid}", user, f"{marker} audited reason"))  # fmt: skip
        doc = tx.execute("INSERT INTO documents (user_id, sha256, kind, size, created_at) VALUES (?, ?, 'pdf', 9, ?)",
                         (user, marker * 2, t))  # fmt: skip
        tx.execute("INSERT INTO document_parts (document_id, part, user_id, bytes) VALUES (?, 0, ?, ?)",
                   (doc, user, f"{marker} file bytes".encode()))  # fmt: skip
        tx.execute("INSERT INTO message_documents (message_row, position, document_id, user_id, session_id, name,"
                   " content_type) SELECT id, 1, ?, ?, ?, ?, 'application/pdf' FROM messages WHERE message_id = ?",
                   (doc, user, sid, f"{marker}.pdf", f"<{marker}@x>"))  # fmt: skip
        tx.execute("INSERT INTO reply_traces (at, user_id, message_id, template, trace) VALUES (?, ?, ?, 'reply', ?)",
                   (t, user, f"<{marker}@x>", f'{{"memories": [{{"id": {mid}, "source": "profile"}}]}}'))  # fmt: skip
        tx.execute("INSERT INTO digests (message_id, user_id, since, created_at, memory_ids) VALUES (?, ?, ?, ?, ?)",
                   (f"<digest-{marker}@x>", user, t, t, f"[{mid}]"))  # fmt: skip
    assert index_message(store, user, f"<{marker}@x>", "in") == 1  # conversation recall's passage of the mail
    store.search(user, f"{marker} flat", k=2)


def _file_bytes(db_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")) if p.exists())


def test_purge_removes_every_trace(database_url: str, embedder: LocalEmbedder):
    recent = RecentEmbeddings(embedder)  # as the daemon wraps its embedder: recent texts kept with their vectors
    store = MemoryStore.open(database_url, embedder=recent)
    try:
        _plant(store, "alice@example.test", "qzalicemark", 1)
        _plant(store, "bob@example.test", "qzbobmark", 2)
        local = not store.db.remote
        if local:
            assert b"qzalicemark" in _file_bytes(Path(database_url))  # the check below can see text at all
        store.search("alice@example.test", "qzalicemark flat", k=5)
        assert any("qzalicemark" in text for text in recent._recent)
        counts = purge(store, "Alice@Example.test")
        assert not any("qzalicemark" in text for text in recent._recent)  # not even in the daemon's memory
        assert counts == {
            "memories": 3, "memory_versions": 5, "messages": 1, "session_ids": 1, "sessions": 1, "user_state": 1,
            "conversation_summaries": 1, "relationships": 1, "entities": 1, "outbox": 1, "llm_usage": 1,
            "mail_state": 1, "memory_retrievals": 1, "confirmations": 0, "passages": 1, "digests": 1,
            "documents": 1, "document_parts": 1, "message_documents": 1, "learning_queue": 1, "audit_log": 1,
            "reply_traces": 1, "prompt_proposals": 1,
        }  # fmt: skip
        assert store.get_all("alice@example.test", include_inactive=True) == []
        assert store.search("alice@example.test", "qzalicemark flat", k=5, include_inactive=True) == []
        assert "alice@example.test" not in store.users()
        assert store.db.query_value("SELECT count(*) FROM mail_state WHERE user_id IS NULL") == 1  # kept, unlinked
        assert store.db.query("SELECT message_id, thread_key FROM mail_state WHERE uid = 1") == [("", None)]
        assert store.db.query_value("SELECT count(*) FROM memory_retrievals") == 1  # only bob's is left
        assert len(store.get_all("bob@example.test", include_inactive=True)) == 3  # Bob keeps everything
        assert store.search("bob@example.test", "qzbobmark flat", k=1)[0].content.startswith("qzbobmark second")
        for fts in ("memories_fts", "messages_fts"):  # the full-text indexes still match their tables
            store.db.execute(f"INSERT INTO {fts} ({fts}) VALUES ('integrity-check')")
        if local:  # while the daemon still runs: the purge itself vacuumed and truncated the WAL
            assert b"qzalicemark" not in _file_bytes(Path(database_url))
    finally:
        store.close()
    if local:
        data = _file_bytes(Path(database_url))
        assert b"qzalicemark" not in data.lower() and b"alice@example.test" not in data
        assert b"qzbobmark" in data  # the file was readable, and Bob's data is still in it


@pytest.mark.long
def test_purge_of_many_users_in_a_large_file(tmp_path: Path, embedder: LocalEmbedder):
    """The long variant: FTS segments of thousands of rows, purged one user at a time."""
    store = MemoryStore.open(str(tmp_path / "big.db"), embedder=embedder)
    try:
        for i in range(20):
            store.add_many([NewMemory(f"u{i}@example.test", f"qzmark{i:02d}y fact {j}") for j in range(100)])
        for i in range(0, 20, 2):
            store.purge(f"u{i}@example.test")
    finally:
        store.close()
    data = _file_bytes(tmp_path / "big.db")
    assert [i for i in range(20) if f"qzmark{i:02d}y".encode() in data] == list(range(1, 20, 2))


def test_knowledge_base_passages_reach_every_user_and_outlive_a_purge(database_url: str, embedder: LocalEmbedder,
                                                                      tmp_path: Path):  # fmt: skip
    """Issue 18: the knowledge base's passages are found for every user (and with anyone on the mail), a user's
    own file only for that user, and a user's purge leaves the knowledge base whole."""
    store = MemoryStore.open(database_url, embedder=embedder)
    try:
        _plant(store, "alice@example.test", "qzalicemark", 1)
        _plant(store, "bob@example.test", "qzbobmark", 2)
        message = stored_message(store.db, "alice@example.test", "<qzalicemark@x>", "in")
        assert message is not None
        write_passages(store, "alice@example.test", message, [("p.1", "The greenhouse lease deposit is qzalicefile.")],
                       document_id=1, document="lease.pdf")  # fmt: skip
        (tmp_path / "handbook.md").write_text("The greenhouse key hangs in locker qzkbfact.")
        assert add_file(store, tmp_path / "handbook.md", DocumentsConfig()).status == "added"
        query = "greenhouse key locker lease deposit"
        for user, others in (("alice@example.test", ()), ("bob@example.test", ()), ("bob@example.test", ("x@y.z",))):
            found = {h.passage.content for h in search_passages(store, user, query, k=20, others=others)}
            files = {h.passage.content for h in search_passages(store, user, query, k=20, documents_only=True)}
            assert "The greenhouse key hangs in locker qzkbfact." in found & files
            assert any("qzalicefile" in c for c in found) == (user == "alice@example.test" and not others)
        assert search_passages(store, "bob@example.test", "qzkbfact")[0].passage.citation == "[doc:handbook.md]"
        purge(store, "alice@example.test")
        kept = store.db.query_value("SELECT count(*) FROM passages WHERE user_id = ?", (KNOWLEDGE_OWNER,))
        assert kept == 1 and not store.db.query_value(
            "SELECT count(*) FROM passages WHERE content LIKE '%qzalicefile%'")  # fmt: skip
        [hit] = [h for h in search_passages(store, "bob@example.test", "greenhouse key locker") if h.passage.shared]
        assert hit.passage.content == "The greenhouse key hangs in locker qzkbfact."
        assert hit.similarity is not None and hit.similarity > 0.5  # the vector scan held both owners' vectors
    finally:
        store.close()


def test_a_knowledge_base_file_scoped_to_a_domain_never_reaches_a_user_of_another(database_url: str,
                                                                                  embedder: LocalEmbedder,
                                                                                  tmp_path: Path):  # fmt: skip
    """``quinn kb add --domain``: a scoped file's passages reach only users at its domains, by every search a
    reply or a tool makes (alone, with others on the mail, files only; the cached vector scan and the SQL scan),
    an unscoped file reaches everyone, and adding the file again without a domain opens it to all."""
    (tmp_path / "payroll.md").write_text("Payroll questions: the salary review deadline is qzscopedfact.")
    (tmp_path / "canteen.md").write_text("Canteen: the salary of the cook is not discussed; lunch at qzopenfact.")
    setup = MemoryStore.open(database_url, embedder=embedder)
    try:
        assert add_file(setup, tmp_path / "payroll.md", DocumentsConfig(), ["Example.org", "@example.com"]).status \
            == "added"  # fmt: skip
        assert add_file(setup, tmp_path / "canteen.md", DocumentsConfig()).status == "added"
    finally:
        setup.close()
    inside = ("alice@example.org", "carol@example.com")
    outside = ("bob@example.net", "dave@sub.example.org", "erin@example.org.evil.test")
    query = "salary review deadline payroll lunch"
    for cache_mb in (256, 0):  # the cached matrices, and the exact SQL scan
        store = MemoryStore.open(database_url, embedder=embedder, vector_cache_mb=cache_mb)
        try:
            for user in (*inside, *outside):
                for kwargs in ({}, {"others": ("x@example.org",)}, {"documents_only": True},
                               {"exclude_message_ids": ("<none@x>",)}):  # fmt: skip
                    found = " ".join(h.passage.content for h in search_passages(store, user, query, k=20, **kwargs))
                    assert "qzopenfact" in found, (user, kwargs)
                    assert ("qzscopedfact" in found) is (user in inside), (user, kwargs, cache_mb)
                lexical = " ".join(h.passage.content for h in search_passages(store, user, "qzscopedfact", k=20))
                assert ("qzscopedfact" in lexical) is (user in inside)
        finally:
            store.close()
    store = MemoryStore.open(database_url, embedder=embedder)
    try:
        assert add_file(store, tmp_path / "payroll.md", DocumentsConfig()).status == "rescoped"
        assert store.db.query("SELECT count(*) FROM document_domains") == [(0,)]
        found = " ".join(h.passage.content for h in search_passages(store, "bob@example.net", query, k=20))
        assert "qzscopedfact" in found
    finally:
        store.close()
