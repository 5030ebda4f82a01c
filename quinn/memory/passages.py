"""Conversation recall: every stored message of a user, cut into passages, searched like memories (issue 14).

Quinn remembered only what a model chose to extract; with a model that extracts little, everything was lost.
So each message kept in the conversation store (``messages``: the clean text, quoted history and signature
already stripped) is also cut into overlapping passages, embedded in one batch per mail and indexed in FTS5
(migration 0008), and a reply's retrieval searches them beside the memories.

The search is the memories' two main legs on another table: an exact scan of the cosine from the mean of the
user's cached vectors (``vectors.PassageVectors``; an SQL scan of the plain cosine when they do not fit) and FTS5
BM25 coverage (the lexical helpers of ``lexical.py``), narrowed to the user's ``owner_key`` token and fused by
rank (RRF). Two rules decide what a search may see: the messages already in the thread buffer are left
out (they are in the prompt verbatim), and with other people on the mail only passages of messages every one of
them saw are eligible: a passage from a one-to-one thread never reaches a prompt with anyone else on it.

Recall does not undo what memory retracted: a mail whose memory was superseded, forgotten, archived, completed or
has expired (``retracted_messages``: the memory's ``source.message_id``) is not recalled, nor the reply to it.
Otherwise "I build with Python on Linux" would come back after "we moved to Node on Docker" replaced it, and a
forgotten detail would return word for word.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from quinn.db import Database, Transaction
from quinn.memory.filters import MAY_BE_RETRACTED, NOT_CURRENT, normalise_user
from quinn.memory.lexical import CANDIDATES, idf, joined_terms, owned, query_terms, within_budget
from quinn.memory.models import iso, utcnow
from quinn.memory.query import rrf
from quinn.memory.search import CHUNK_WEIGHT_DECAY, Centre, query_chunks
from quinn.memory.sensitive import mask

if TYPE_CHECKING:
    from quinn.memory.store import MemoryStore

log = logging.getLogger(__name__)

PASSAGE_CHARS = 600  # about 150 tokens: a paragraph, small enough to cite, big enough to carry its context
OVERLAP_CHARS = 120  # the last sentence or so of a passage starts the next one: a fact cut in two is found whole
PASSAGE_COLUMNS = (
    "p.id, p.user_id, p.message_id, p.direction, p.sent_at, p.subject, p.position, p.content, p.audience,"
    " p.document, p.ref"
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")
BM25 = "bm25(passages_fts, 1.0, 0.0)"  # content; the owner column weighs nothing
# The owner of the knowledge base's passages (``quinn kb``, issue 18): files the admin added for every user. Not an
# address, so no mail and no purge of a user ever names it; ``user_id`` stays NOT NULL, and the owner token, the
# vector cache and the full-text index treat it as one more owner that every user's search adds to its own.
KNOWLEDGE_OWNER = "(knowledge base)"
# A knowledge-base passage a user may see: of a file scoped to no domain, or to the user's (one parameter).
IN_SCOPE = (
    "(NOT EXISTS (SELECT 1 FROM document_domains dd WHERE dd.document_id = p.document_id)"
    " OR EXISTS (SELECT 1 FROM document_domains dd WHERE dd.document_id = p.document_id AND dd.domain = ?))"
)


def user_domain(user: str) -> str:
    """The mail domain of a canonical address (``alice@example.org`` -> ``example.org``); "" for none."""
    return user.rpartition("@")[2] if "@" in user else ""


@dataclass(frozen=True)
class Passage:
    """A piece of one stored message."""

    id: int
    user_id: str
    message_id: str
    direction: str  # "in": the user wrote it; "out": Quinn's reply
    sent_at: str
    subject: str
    position: int
    content: str
    audience: frozenset[str]  # everyone who saw the message
    document: str = ""  # the attached file this passage is from (issue 18), by its display name; "": the mail
    ref: str = ""  # where in the file: "p.3", a heading, "rows 2-41"

    @property
    def shared(self) -> bool:
        """A passage of the knowledge base, which every user's replies may draw on."""
        return self.user_id == KNOWLEDGE_OWNER

    @property
    def citation(self) -> str:
        """``[mail:2026-03-14]``: where Quinn knows it from, the date of the mail; ``[doc:NAME p.3]`` for a file."""
        if self.document:
            return f"[doc:{self.document}{' ' + self.ref if self.ref else ''}]"
        return f"[mail:{self.sent_at[:10]}]"

    def line(self) -> str:
        """How the model sees it: ``[mail:2026-03-14] (they wrote, "Subject") text`` (or "you replied");
        ``[doc:NAME p.3] (a file they sent on 2026-03-14, "Subject") text`` for an attached file."""
        if self.shared:
            return f"{self.citation} (the knowledge base) {self.content}"
        if self.document:
            return f'{self.citation} (a file they sent on {self.sent_at[:10]}, "{self.subject}") {self.content}'
        who = "they wrote" if self.direction == "in" else "you replied"
        return f'{self.citation} ({who}, "{self.subject}") {self.content}'

    def seen_by(self, others: Iterable[str]) -> bool:
        """Whether every one of ``others`` saw this message (nobody: always; the knowledge base: everyone did)."""
        return self.shared or set(others) <= self.audience

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Passage:
        """From a row of ``PASSAGE_COLUMNS``."""
        pid, user, message_id, direction, sent_at, subject, position, content, audience, document, ref = row
        try:
            seen = frozenset(str(a) for a in json.loads(audience or "[]"))
        except ValueError:
            seen = frozenset()
        return cls(int(pid), user, message_id, direction, sent_at, subject or "", int(position), content, seen,
                   document or "", ref or "")  # fmt: skip


@dataclass(frozen=True)
class PassageHit:
    """A passage found by a search, with its fused score and cosine similarity (None: matched by words only)."""

    passage: Passage
    score: float
    similarity: float | None = None
    worded: bool = False  # a content word of the query is in it


def split_passages(text: str, size: int = PASSAGE_CHARS, overlap: int = OVERLAP_CHARS) -> list[str]:
    """``text`` as passages of about ``size`` characters on sentence boundaries, each starting with the last
    ``overlap`` characters' worth of whole sentences of the one before. A sentence longer than ``size`` is cut
    into windows that overlap by ``overlap`` characters. Pure."""
    sentences: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        for sentence in _SENTENCE.split(" ".join(paragraph.split())):
            starts = [0]
            while starts[-1] + size < len(sentence):
                starts.append(starts[-1] + max(size - overlap, 1))
            sentences += [sentence[i : i + size] for i in starts]
    sentences = [s for s in sentences if s.strip()]
    passages: list[str] = []
    current: list[str] = []
    for sentence in sentences:
        if current and len(" ".join([*current, sentence])) > size:
            passages.append(" ".join(current))
            carried: list[str] = []
            for previous in reversed(current):
                if len(" ".join([previous, *carried])) > overlap:
                    break
                carried.insert(0, previous)
            current = carried
        current.append(sentence)
    if current:
        passages.append(" ".join(current))
    return passages


@dataclass(frozen=True)
class StoredMessage:
    """What a passage repeats of its message (``messages``)."""

    row: int  # messages.id
    message_id: str
    in_reply_to: str | None
    direction: str
    sent_at: str
    subject: str
    body: str
    audience: tuple[str, ...]  # the sender and the recipients


def stored_message(db: Database, user_id: str, message_id: str, direction: str) -> StoredMessage | None:
    """The user's stored message by Message-ID and direction; None when there is none, or it is someone else's."""
    row = db.query_one(
        "SELECT id, user_id, subject, from_addr, to_addrs, sent_at, body, in_reply_to FROM messages"
        " WHERE message_id = ? AND direction = ?",
        (message_id, direction),
    )
    if row is None or row[1] != normalise_user(user_id):
        return None
    message_row, _owner, subject, sender, recipients, sent_at, body, in_reply_to = row
    try:
        audience = sorted({sender, *json.loads(recipients or "[]")} - {""})
    except ValueError:
        audience = [sender]
    return StoredMessage(message_row, message_id, in_reply_to, direction, sent_at, subject or "", body or "",
                         tuple(audience))  # fmt: skip


def index_message(store: MemoryStore, user_id: str, message_id: str, direction: str) -> int:
    """Cut the stored message (``messages``) into passages, embed them in one batch and store them; returns how
    many were written. Idempotent: a message already indexed is left alone (a retried mail costs nothing)."""
    user = normalise_user(user_id)
    message = stored_message(store.db, user, message_id, direction) if user else None
    if user is None or message is None:
        return 0
    if store.db.query_value("SELECT 1 FROM passages WHERE message_row = ? AND document_id IS NULL LIMIT 1",
                            (message.row,)):  # fmt: skip
        return 0
    return write_passages(store, user, message, [("", p) for p in split_passages(message.body)])


def write_passages(
    store: MemoryStore, user: str, message: StoredMessage, pieces: Sequence[tuple[str, str]], *,
    document_id: int | None = None, document: str | None = None,
) -> int:  # fmt: skip
    """Embed ``pieces`` (ref, content) in one batch and store them as passages of ``message`` (of an attached
    file when ``document_id`` is given), numbered after the message's passages so far; returns how many."""
    if not pieces:
        return 0
    if user != KNOWLEDGE_OWNER:  # a person's secrets never become recall (issue 35); the admin's files stay whole
        pieces = [(ref, mask(content)) for ref, content in pieces]
    embedder = store.embedder
    vectors = embedder.embed([embedded_text(message.subject, content) for _ref, content in pieces]) \
        if embedder is not None else None  # fmt: skip
    with store.db.transaction() as tx:
        insert_passages(tx, user, message, pieces, vectors, embedder.model_id if embedder is not None else None,
                        document_id=document_id, document=document)  # fmt: skip
    return len(pieces)


def insert_passages(
    tx: Transaction, user: str, message: StoredMessage, pieces: Sequence[tuple[str, str]], vectors: Any,
    model_id: str | None, *, document_id: int | None = None, document: str | None = None,
) -> None:  # fmt: skip
    """Store ``pieces`` (ref, content) with their ``vectors`` (None: not embedded) in ``tx``, numbered after the
    message's passages so far."""
    now = iso(utcnow())
    start = int(tx.query("SELECT coalesce(max(position), -1) + 1 FROM passages WHERE message_row = ?",
                         (message.row,))[0][0])  # fmt: skip
    for i, (ref, content) in enumerate(pieces):
        blob = np.asarray(vectors[i], dtype=np.float32).tobytes() if vectors is not None else None
        tx.execute(
            "INSERT OR IGNORE INTO passages (user_id, message_row, message_id, in_reply_to, direction, sent_at,"
            " subject, position, content, audience, embedding, embedding_model, created_at, document_id,"
            " document, ref) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (user, message.row, message.message_id, message.in_reply_to, message.direction, message.sent_at,
             message.subject, start + i, content, json.dumps(list(message.audience)), blob, model_id, now,
             document_id, document, ref or None),
        )  # fmt: skip


def drop_document_passages(tx: Transaction, user: str, document_id: int) -> int:
    """Delete the user's passages of one file (a file leaving the knowledge base, in its transaction); returns
    how many."""
    return tx.delete("passages", "user_id = ? AND document_id = ?", (user, document_id))


def document_passage_counts(db: Database, user: str) -> dict[int, tuple[int, int, int]]:
    """Per file of the user's: (passages, sections, pages) its passages make, a section being a distinct ref (a
    text without pages or headings is one section) and a page a distinct ``p.N`` ref; a file without passages
    is absent."""
    rows = db.query(
        "SELECT document_id, count(*), count(DISTINCT coalesce(ref, '')),"
        " count(DISTINCT CASE WHEN ref LIKE 'p.%' THEN ref END)"
        " FROM passages WHERE user_id = ? AND document_id IS NOT NULL GROUP BY document_id",
        (user,),
    )
    return {int(doc): (int(passages), int(sections), int(pages)) for doc, passages, sections, pages in rows}


def backfill(
    store: MemoryStore, keep: Callable[[str, str], bool], *, progress: Callable[[int, int], None] | None = None
) -> int:
    """Index the stored messages that have no passages yet: mail kept before conversation recall existed
    (migration 0008), or while the embedder was down. The mail path's rules hold: ``keep(subject, body)`` says
    whether an incoming mail joins recall (the agent's rule: not a memory command or confirmation), a reply
    joins only when the mail it answers did, and nothing of a user who opted out of memory is indexed. Mail
    first, then replies, each message in its own transaction (``index_message``): an interrupted run resumes.
    Returns the passages written."""
    db = store.db
    pending = db.query(
        "SELECT m.message_id, m.direction, m.user_id, coalesce(m.subject, ''), coalesce(m.body, ''), m.in_reply_to"
        " FROM messages m WHERE m.user_id IS NOT NULL AND m.direction IN ('in', 'out')"
        " AND NOT EXISTS (SELECT 1 FROM passages p WHERE p.message_row = m.id AND p.document_id IS NULL)"
        " AND m.user_id NOT IN (SELECT user_id FROM memory_consent) ORDER BY m.direction, m.id"
    )
    written = 0
    for done, (message_id, direction, user, subject, body, in_reply_to) in enumerate(pending, 1):
        if direction == "in":
            wanted = keep(subject, body)
        else:  # a reply: recalled with the mail it answers, never alone (a command's answer names what it did)
            wanted = bool(in_reply_to) and db.query_value(
                "SELECT 1 FROM passages WHERE message_id = ? AND direction = 'in' LIMIT 1", (in_reply_to,)
            ) is not None  # fmt: skip
        if wanted:
            written += index_message(store, user, message_id, direction)
        if progress is not None:
            progress(done, len(pending))
    return written


def reembed(
    store: MemoryStore, *, batch_size: int, progress: Callable[[int, int], None] | None = None,
    owner: str | None = None, every: bool = False,
) -> int:  # fmt: skip
    """Embed again every passage whose vector is missing or of another model than the configured one (as
    ``MemoryStore.reembed`` does for memories: vector search reads only the configured model's vectors); only
    ``owner``'s when given (``quinn kb reindex``: the knowledge base), and with ``every`` all of them whatever
    their vector. Each batch is committed on its own. Returns the passages re-embedded."""
    embedder = store.embedder
    if embedder is None:
        return 0
    db = store.db
    model, dim = embedder.model_id, embedder.dim
    stale = "(embedding IS NULL OR embedding_model IS NOT ? OR length(embedding) != ?)"
    if every:
        stale = "(? IS NOT NULL AND ? IS NOT NULL)"  # the same two parameters, always true
    if owner is not None:
        stale += " AND user_id = ?"
    wanted = (model, dim * 4) if owner is None else (model, dim * 4, owner)
    total = int(db.query_value(f"SELECT count(*) FROM passages WHERE {stale}", wanted) or 0)
    done = last_id = 0
    while rows := db.query(
        f"SELECT id, subject, content FROM passages WHERE id > ? AND {stale} ORDER BY id LIMIT ?",
        (last_id, *wanted, max(1, int(batch_size))),
    ):
        vectors = embedder.embed([embedded_text(subject, content) for _id, subject, content in rows])
        with db.transaction() as tx:
            for (pid, _subject, _content), vector in zip(rows, vectors, strict=True):
                tx.execute(
                    "UPDATE passages SET embedding = ?, embedding_model = ? WHERE id = ?",
                    (np.asarray(vector, dtype=np.float32).tobytes(), model, pid),
                )
            # The stamp counts inserts and deletes only (passages are otherwise never changed in place): a changed
            # vector is a change, so every process's cached matrix reloads.
            tx.execute("UPDATE passage_vector_stamp SET changes = changes + 1 WHERE id = 1")
        done += len(rows)
        last_id = int(rows[-1][0])
        if progress is not None:
            progress(done, max(total, done))
    return done


def embedded_text(subject: str, content: str) -> str:
    """What a passage's vector is computed from. With the subject, which often names the topic; a short mail's
    text is then exactly its search query (search.query_chunks of subject and text), so the embedder's cache
    serves both with one model call."""
    return " ".join(f"{subject or ''}\n{content}".split())


def retracted_messages(db: Database, user_id: str, domains: Sequence[str] = ()) -> list[str]:
    """Message-IDs of the user's mail that memory has since retracted: the sources of memories no longer current
    (superseded, forgotten or archived, closed, expired). Their passages, and those of our replies to them, are
    not recalled. With ``domains`` detected for the mail, also the mail whose memories all belong to other
    domains: the rule that keeps another domain's memories out of the prompt (a mail with no memory, or none
    with a domain, stays eligible, as memories without a domain do)."""
    user = normalise_user(user_id)
    # The first condition is the partial index's (migration 0008), so only such rows are read.
    rows = db.query(
        "SELECT DISTINCT json_extract(metadata, '$.source.message_id') FROM memories WHERE user_id = ?"
        f" AND {MAY_BE_RETRACTED} AND ({NOT_CURRENT} OR expires_at <= ?)",
        (user, iso(utcnow())),
    )
    if domains:
        marks = ",".join("?" * len(domains))
        rows += db.query(
            "SELECT json_extract(metadata, '$.source.message_id') AS source FROM memories WHERE user_id = ?"
            f" AND domain IS NOT NULL GROUP BY source HAVING sum(domain IN ({marks})) = 0",
            (user, *domains),
        )
    return sorted({r[0] for r in rows if r[0]})


_JSON_LIST = "(SELECT value FROM json_each(?))"  # a list of ids, any length, as one parameter


def passage_filter(
    user_id: str, exclude_message_ids: Sequence[str] = (), others: Sequence[str] = (), retracted: Sequence[str] = (),
    documents_only: bool = False, knowledge: bool = False,
) -> tuple[str, list[Any]]:  # fmt: skip
    """The WHERE clause (alias ``p``) of the passages a search may see: the user's, not of the excluded messages
    (the thread buffer), not of a ``retracted`` mail or a reply to one, and with ``others`` on the mail only those
    of messages each of them saw; with ``documents_only``, only passages of attached files. With ``knowledge``,
    the knowledge base's passages too, whoever else is on the mail (they are everyone's), but of a file scoped to
    domains (``quinn kb add --domain``, migration 0018) only for a user at one of them."""
    user = normalise_user(user_id)
    owner = f"(p.user_id = ? OR (p.user_id = ? AND {IN_SCOPE}))" if knowledge else "p.user_id = ?"
    clauses = [owner, "p.document_id IS NOT NULL"] if documents_only else [owner]
    params: list[Any] = [user, KNOWLEDGE_OWNER, user_domain(user or "")] if knowledge else [user]
    # Id lists go in as one JSON parameter each: what memory retracted grows with the user's history, and SQLite
    # refuses more than 32,766 parameters in one statement (issue 30).
    if exclude_message_ids:
        clauses.append(f"p.message_id NOT IN {_JSON_LIST}")
        params.append(json.dumps(list(exclude_message_ids)))
    if retracted:
        clauses.append(f"p.message_id NOT IN {_JSON_LIST} AND coalesce(p.in_reply_to, '') NOT IN {_JSON_LIST}")
        params += [json.dumps(list(retracted))] * 2
    if others:
        seen = (
            "NOT EXISTS (SELECT 1 FROM json_each(?) o WHERE o.value NOT IN (SELECT value FROM json_each(p.audience)))"
        )
        clauses.append(f"(p.user_id = ? OR {seen})" if knowledge else seen)
        params += [KNOWLEDGE_OWNER] if knowledge else []
        params.append(json.dumps(sorted(set(others))))
    return " AND ".join(clauses), params


def search_passages(
    store: MemoryStore, user_id: str, query: str, *, k: int = 10, exclude_message_ids: Sequence[str] = (),
    others: Sequence[str] = (), domains: Sequence[str] = (), documents_only: bool = False, knowledge: bool = True,
) -> list[PassageHit]:  # fmt: skip
    """The user's ``k`` best conversation passages for ``query``, best first (``passage_filter`` says which are
    eligible, given what memory retracted and the mail's ``domains``: ``retracted_messages``), with the
    knowledge base's unless ``knowledge`` is False. Vector and lexical legs as in ``search.hybrid_search``;
    passages carry no importance to weigh.

    The two legs are fused by rank (RRF, k = 60), the vector leg ranked by the cosine from the mean of the
    owners' vectors (``search.Centre``), as the memories' search does since issue 31. The convex fusion it
    replaces (0.8 × cosine + 0.2 × BM25 coverage, chosen on generated mail) put the answer in the top 10 for
    0.527 of 311 FriendsQA questions asked of the long-memory benchmark's real people, plain BM25 for 0.662 and
    this fusion for 0.640 (0.566 against 0.450 in the top 5); bench/README.md, "Passages by rank"."""
    user = normalise_user(user_id)
    chunks = query_chunks(query)
    if not chunks or not user:
        return []
    retracted = retracted_messages(store.db, user, domains)
    knowledge = knowledge and user != KNOWLEDGE_OWNER
    owners = [user, KNOWLEDGE_OWNER] if knowledge else [user]
    where, params = passage_filter(user, exclude_message_ids, others, retracted, documents_only, knowledge)
    lexical = _lexical_scores(store.db, where, params, " ".join(chunks), owners)
    similarities: dict[int, tuple[float, float]] = {}
    embedder = store.embedder
    if embedder is not None:
        vectors = np.asarray(embedder.embed(chunks), dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        if others or documents_only:  # narrow: the passages that pass, read whole (a few thousand ids at most)
            passing = store.db.query(f"SELECT p.id FROM passages p WHERE {where}", params)
            eligible: Eligible = (True, np.asarray([r[0] for r in passing], dtype=np.int64))
        else:  # the thread buffer, retracted mail, files scoped to other domains: found by their indexes
            left_out = _left_out(store.db, user, exclude_message_ids, retracted)
            if knowledge:
                left_out = np.concatenate([left_out, _out_of_scope(store.db, user)])
            eligible = (False, left_out)
        similarities = _vector_scores(store, owners, where, params, vectors, lexical, eligible)
    by_vector = sorted(similarities, key=lambda pid: (-similarities[pid][0], -pid))
    by_words = sorted(lexical, key=lambda pid: (-lexical[pid], -pid))
    fused = rrf([by_vector, by_words])
    best = sorted(fused, key=lambda pid: (-fused[pid], -pid))[:k]
    if not best:
        return []
    rows = store.db.query(
        f"SELECT {PASSAGE_COLUMNS} FROM passages p WHERE p.id IN ({','.join('?' * len(best))}) AND {where}",
        [*best, *params],
    )
    found = {int(row[0]): Passage.from_row(row) for row in rows}
    return [
        PassageHit(found[pid], fused[pid], similarities[pid][1] if pid in similarities else None, pid in lexical)
        for pid in best
        if pid in found
    ]


def _lexical_scores(
    db: Database, where: str, params: Sequence[Any], text: str, owners: Sequence[str]
) -> dict[int, float]:
    """FTS5 BM25 coverage (BM25 / the query's total IDF, capped at 1) of the ``owners``' best-matching passages
    (the user's, and the knowledge base's), the measure ``lexical.lexical_scores`` gives memories, with its
    budget for common terms."""
    words = query_terms(text)
    if not words:
        return {}
    terms = [*words, *joined_terms(text)]
    counts = ", ".join("(SELECT count(*) FROM passages_fts WHERE passages_fts MATCH ?)" for _ in terms)
    row = db.query_one(f"SELECT (SELECT count(*) FROM passages), {counts}", [_match([t]) for t in terms])
    total, frequencies = (int(row[0]), [int(n) for n in row[1:]]) if row else (0, [0] * len(terms))
    kept = within_budget(terms, frequencies)
    if not kept:
        return {}
    match = owned(_match(kept), owners)
    rows = db.query(
        f"SELECT {BM25}, p.id FROM passages_fts JOIN passages p ON p.id = passages_fts.rowid"
        f" WHERE passages_fts MATCH ? AND {where} ORDER BY {BM25} LIMIT ?",
        [match, *params, CANDIDATES],
    )
    # A join is another spelling of two words already counted: it adds no IDF to the query's mass.
    mass = max(sum(idf(total, n) for n in frequencies[: len(words)]), 1e-6)
    return {int(pid): min(1.0, -float(bm25) / mass) for bm25, pid in rows}


def _match(terms: Sequence[str]) -> str:
    """The terms OR-ed in the content column, each quoted: no user text becomes FTS syntax."""
    return "content : (" + " OR ".join('"' + t.replace('"', '""') + '"' for t in terms) + ")"


Eligible = tuple[bool, np.ndarray]  # (True: only these ids, False: all but these ids)


def _left_out(db: Database, user: str, exclude_message_ids: Sequence[str], retracted: Sequence[str]) -> np.ndarray:
    """Ids of the user's passages of the excluded or retracted mail, and of our replies to retracted mail."""
    messages = [*exclude_message_ids, *retracted]
    if not messages:
        return np.zeros(0, dtype=np.int64)
    # Two lookups by index (an OR of the two columns scanned every row of the user, vectors included: 26 ms).
    # "+user_id": not by the user's index, which the planner would otherwise prefer (and read every row of).
    sql = f"SELECT id FROM passages WHERE message_id IN {_JSON_LIST} AND +user_id = ?"
    params: list[Any] = [json.dumps(messages), user]
    if retracted:
        sql += f" UNION SELECT id FROM passages WHERE in_reply_to IN {_JSON_LIST} AND +user_id = ?"
        params += [json.dumps(list(retracted)), user]
    rows = db.query(sql, params)
    return np.asarray([r[0] for r in rows], dtype=np.int64)


def _out_of_scope(db: Database, user: str) -> np.ndarray:
    """Ids of the knowledge base's passages of files scoped to domains other than the user's (none scoped: one
    look at a small table)."""
    scoped = db.query("SELECT document_id FROM document_domains GROUP BY document_id HAVING sum(domain = ?) = 0",
                      (user_domain(user),))  # fmt: skip
    if not scoped:
        return np.zeros(0, dtype=np.int64)
    rows = db.query(f"SELECT id FROM passages WHERE document_id IN ({','.join('?' * len(scoped))}) AND user_id = ?",
                    [*(r[0] for r in scoped), KNOWLEDGE_OWNER])  # fmt: skip
    return np.asarray([r[0] for r in rows], dtype=np.int64)


def _vector_scores(
    store: MemoryStore, owners: Sequence[str], where: str, params: Sequence[Any], vectors: np.ndarray,
    lexical: dict[int, float], eligible: Eligible,
) -> dict[int, tuple[float, float]]:  # fmt: skip
    """(closeness, cosine) of the ``CANDIDATES`` closest eligible passages, and of every lexical match (a lexical
    match keeps its true closeness, as in the memories' fusion): closeness, what the vector leg ranks by, is the
    cosine from the mean of the scanned vectors (``Centre``), the best over the query chunks with the later
    chunks' decayed; cosine, what the relevance cutoff reads, is the plain best. ``eligible`` says which of the
    cached rows pass the filter, so the scan needs no SQL per candidate. The ``owners``' cached matrices (the
    user's, the knowledge base's) are scanned as one."""
    assert store.embedder is not None
    model_id, dim = store.embedder.model_id, store.embedder.dim
    cache = store.passage_cache
    try:
        if cache is None:
            raise LookupError("no cache")
        held = [cache.vectors(store.db, owner, model_id, dim) for owner in owners]
    except LookupError:
        return _sql_vector_scores(store, where, params, vectors, lexical)
    ids, matrix = held[0]
    if len(held) > 1:  # ids ascending, as the lexical lookup below needs
        ids, matrix = np.concatenate([h[0] for h in held]), np.concatenate([h[1] for h in held])
        order = np.argsort(ids, kind="stable")
        ids, matrix = ids[order], matrix[order]
    if not len(ids):
        return {}
    raw, centred = Centre(matrix).similarities(matrix, vectors)  # (passages, chunks) each
    if len(vectors) == 1:  # one chunk (most queries)
        best, weighted = raw[:, 0], centred[:, 0]
    else:
        weighted = (centred * CHUNK_WEIGHT_DECAY ** np.arange(len(vectors), dtype=np.float32)).max(axis=1)
        best = raw.max(axis=1)
    only, listed = eligible
    mask = np.isin(ids, listed) if only else ~np.isin(ids, listed) if len(listed) else np.ones(len(ids), dtype=bool)
    weighted = np.where(mask, weighted, -np.inf)
    count = min(CANDIDATES, int(mask.sum()))
    scores: dict[int, tuple[float, float]] = {}
    if count:
        top = np.argpartition(-weighted, count - 1)[:count] if count < len(ids) else np.flatnonzero(mask)
        scores = {int(ids[i]): (float(weighted[i]), float(best[i])) for i in top}
    wanted = np.asarray([pid for pid in lexical if pid not in scores], dtype=np.int64)
    if len(wanted):
        at = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
        for pid, i in zip(wanted, at, strict=True):
            if ids[i] == pid:
                scores[int(pid)] = (float(weighted[i]), float(best[i]))
    return scores


def _sql_vector_scores(
    store: MemoryStore, where: str, params: Sequence[Any], vectors: np.ndarray, lexical: dict[int, float]
) -> dict[int, tuple[float, float]]:
    """Scores as ``_vector_scores`` gives them, by an exact SQL scan (a user whose passages do not fit in the
    cache): the scan knows no mean, so closeness is the plain cosine, as in the memories' search."""
    assert store.embedder is not None
    model_id, dim = store.embedder.model_id, store.embedder.dim
    scores: dict[int, float] = {}
    wanted = list(lexical)
    for vector in vectors:
        blob = vector.tobytes()
        rows = store.db.query(
            f"SELECT p.id, vector_distance_cos(p.embedding, ?) AS d FROM passages p WHERE {where}"
            " AND p.embedding_model = ? AND length(p.embedding) = ? ORDER BY d LIMIT ?",
            [blob, *params, model_id, dim * 4, CANDIDATES],
        )
        if wanted:
            rows += store.db.query(
                f"SELECT p.id, vector_distance_cos(p.embedding, ?) FROM passages p WHERE p.id IN"
                f" ({','.join('?' * len(wanted))}) AND p.embedding_model = ? AND length(p.embedding) = ?",
                [blob, *wanted, model_id, dim * 4],
            )
        for pid, distance in rows:
            if distance is not None:
                scores[int(pid)] = max(scores.get(int(pid), -1.0), 1.0 - float(distance))
    return {pid: (cosine, cosine) for pid, cosine in scores.items()}


def user_passages(db: Database, user_id: str, others: Sequence[str] = ()) -> list[Passage]:
    """Every passage of the user, oldest first (for an export); with ``others``, only those each of them saw."""
    where, params = passage_filter(user_id, (), others)
    rows = db.query(f"SELECT {PASSAGE_COLUMNS} FROM passages p WHERE {where} ORDER BY p.sent_at, p.id", params)
    return [Passage.from_row(row) for row in rows]


def passages_by_id(db: Database, ids: Sequence[int]) -> dict[int, Passage]:
    """The passages of ``ids`` that still exist, by id (a reply's trace names them; retention may have gone by)."""
    wanted = sorted({int(i) for i in ids})
    if not wanted:
        return {}
    marks = ", ".join("?" * len(wanted))
    rows = db.query(f"SELECT {PASSAGE_COLUMNS} FROM passages p WHERE p.id IN ({marks})", wanted)
    return {passage.id: passage for passage in map(Passage.from_row, rows)}


PASSAGE_COPY = ("user_id, message_row, message_id, in_reply_to, direction, sent_at, position, audience, created_at,"
                " document_id")  # fmt: skip


def rewrite_passages(
    db: Database, user_id: str, rewrite: Callable[[str], str | None],
    rename: Callable[[str], str | None] | None = None,
) -> int:  # fmt: skip
    """A forget's part of recall (issue 35): each of the user's passages whose subject, text or heading
    (``ref``) ``rewrite`` changes (it returns None for a text it leaves alone), or whose file name ``rename``
    changes, is replaced by one without the forgotten fact, with no vector (found by full-text until `quinn
    memory reembed`), so the fact stays out of recall, the cited names and the export. Passages are never updated
    in place (the vector caches rely on it): the old row is deleted and the new one inserted at its place in the
    message, so backfill never indexes the message again. Returns how many."""
    user = normalise_user(user_id)
    rows = db.query("SELECT id, subject, content, document, ref FROM passages WHERE user_id = ?", (user,))
    changed = 0
    with db.transaction() as tx:
        for passage_id, *old_words in rows:
            subject, content, document, ref = (value or "" for value in old_words)
            new = [rewrite(subject), rewrite(content), rename(document) if rename and document else None,
                   rewrite(ref) if ref else None]  # fmt: skip
            if all(value is None for value in new):
                continue
            words = [was if now is None else now for was, now in zip(old_words, new, strict=True)]
            old = tx.query(f"SELECT {PASSAGE_COPY} FROM passages WHERE id = ?", (passage_id,))[0]
            tx.execute("DELETE FROM passages WHERE id = ?", (passage_id,))
            tx.execute(f"INSERT INTO passages ({PASSAGE_COPY}, subject, content, document, ref)"
                       f" VALUES ({', '.join('?' * 14)})", (*old, *words))  # fmt: skip
            changed += 1
    return changed
