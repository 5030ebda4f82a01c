"""MemoryStore: create, read, version, forget and purge memories; search lives in ``search.py``.

Memories are never overwritten: ``update`` writes version n+1 as a new row and closes the old one
(``valid_to``, ``superseded_by``); ``forget`` makes a memory inactive but keeps it in history; only ``purge``
deletes, and then it removes every trace of the user.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from quinn.errors import StoreError
from quinn.memory.db import Database, Transaction
from quinn.memory.embed import Embedder
from quinn.memory.models import (
    MEMORY_COLUMNS,
    SCHEMA_VERSION,
    SCOPES,
    Memory,
    NewMemory,
    SearchHit,
    iso,
    utcnow,
)

log = logging.getLogger(__name__)


class MemoryStore:
    """Long-term memory of every user, over one ``Database``; all methods are synchronous (see ``Database.run``)."""

    def __init__(self, db: Database, embedder: Embedder | None) -> None:
        self.db = db
        self.embedder = embedder
        if embedder is None:
            log.warning("memory search runs on full-text only: no embedder is configured")

    @classmethod
    def open(cls, database_url: str, *, embedder: Embedder | str | None = "default", auth_token: str | None = None):
        """Open (and migrate) the database at ``database_url``; the default embedder is the local model."""
        if embedder == "default":
            from quinn.memory.embed import LocalEmbedder

            embedder = LocalEmbedder()
        assert not isinstance(embedder, str)
        return cls(Database.open(database_url, auth_token), embedder)

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    # -- writing ---------------------------------------------------------------------------------------

    def _vectors(self, texts: Sequence[str]) -> np.ndarray | None:
        if self.embedder is None or not texts:
            return None
        vectors = self.embedder.embed(list(texts))
        if vectors.shape != (len(texts), self.embedder.dim) or vectors.dtype != np.float32:
            # F32_BLOB accepts blobs of any length: a wrong shape would silently corrupt search.
            raise StoreError(
                f"embedder {self.embedder.model_id} returned shape {vectors.shape} {vectors.dtype}, "
                f"expected ({len(texts)}, {self.embedder.dim}) float32"
            )
        return vectors

    def add(
        self,
        user_id: str | None,
        content: str,
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
        """Store one memory and return its id."""
        item = NewMemory(
            user_id=user_id, content=content, scope=scope, type=type, domain=domain, tags=tuple(tags),
            metadata=dict(metadata or {}), importance=importance, valid_from=valid_from, expires_at=expires_at,
            immutable=immutable,
        )  # fmt: skip
        return self.add_many([item])[0]

    def add_many(self, items: Sequence[NewMemory]) -> list[int]:
        """Store many memories: one batched embedding call and one transaction."""
        for index, item in enumerate(items):
            _check_new(item, index)
        vectors = self._vectors([item.content for item in items])
        now = iso(utcnow())
        ids: list[int] = []
        with self.db.transaction() as tx:
            for index, item in enumerate(items):
                vector = vectors[index].tobytes() if vectors is not None else None
                ids.append(self._insert(tx, item, vector, now, version=1, root_id=None))
        return ids

    def _insert(
        self, tx: Transaction, item: NewMemory, vector: bytes | None, now: str | None, *, version: int,
        root_id: int | None,
    ) -> int:  # fmt: skip
        metadata = json.dumps(item.metadata, ensure_ascii=False, sort_keys=True)
        new_id = tx.execute(
            "INSERT INTO memories (user_id, scope, domain, type, content, tags, metadata, importance, created_at,"
            " updated_at, version, root_id, valid_from, expires_at, immutable, embedding, embedding_model,"
            " schema_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                _norm_user(item.user_id), item.scope, item.domain, item.type, item.content,
                json.dumps(sorted(set(item.tags)), ensure_ascii=False), metadata, float(item.importance), now,
                now, version, root_id, iso(item.valid_from) or now, iso(item.expires_at), int(item.immutable),
                vector, self.embedder.model_id if (self.embedder and vector is not None) else None,
                SCHEMA_VERSION,
            ),
        )  # fmt: skip
        if root_id is None:
            root_id = new_id
            tx.execute("UPDATE memories SET root_id = ? WHERE id = ?", (new_id, new_id))
        _record_version(tx, new_id, root_id, item.user_id, version, "created" if version == 1 else "updated",
                        item.content, metadata, None, now)  # fmt: skip
        return new_id

    def update(
        self,
        memory_id: int,
        content: str,
        *,
        user_id: str | None = None,
        reason: str | None = None,
        valid_from: datetime | str | None = None,
        metadata: dict[str, Any] | None = None,
        importance: float | None = None,
        allow_immutable: bool = False,
    ) -> int:
        """Write version n+1 of a current memory; the old row is closed at ``valid_from`` (default now).

        ``user_id``, when given, must own the memory: the agent always passes it. Returns the new id.
        """
        old = self._current_for_change(memory_id, user_id, allow_immutable, "update")
        change_at = iso(valid_from) or iso(utcnow())
        merged_meta = {**old.metadata, **(metadata or {})}
        item = NewMemory(
            user_id=old.user_id, content=content, scope=old.scope, type=old.type, domain=old.domain,
            tags=old.tags, metadata=merged_meta, importance=old.importance if importance is None else importance,
            valid_from=change_at, expires_at=old.expires_at, immutable=old.immutable,
        )  # fmt: skip
        _check_new(item, 0)
        vectors = self._vectors([content])
        now = iso(utcnow())
        with self.db.transaction() as tx:
            new_id = self._insert(tx, item, vectors[0].tobytes() if vectors is not None else None, now,
                                  version=old.version + 1, root_id=old.root_id)  # fmt: skip
            tx.execute(
                "UPDATE memories SET valid_to = ?, superseded_by = ?, updated_at = ? WHERE id = ?",
                (change_at, new_id, now, old.id),
            )
            _record_version(tx, old.id, old.root_id, old.user_id, old.version, "superseded", old.content,
                            json.dumps(old.metadata, sort_keys=True), reason, now)  # fmt: skip
        return new_id

    def supersede(self, memory_ids: Sequence[int], by: NewMemory, *, reason: str | None = None) -> int:
        """Replace several current memories with one new memory (consolidation, contradiction)."""
        olds = [self._current_for_change(mid, by.user_id, False, "supersede") for mid in memory_ids]
        _check_new(by, 0)
        vectors = self._vectors([by.content])
        now = iso(utcnow())
        change_at = iso(by.valid_from) or now
        with self.db.transaction() as tx:
            new_id = self._insert(tx, replace(by, valid_from=change_at),
                                  vectors[0].tobytes() if vectors is not None else None, now, version=1,
                                  root_id=None)  # fmt: skip
            for old in olds:
                tx.execute(
                    "UPDATE memories SET valid_to = ?, superseded_by = ?, updated_at = ? WHERE id = ?",
                    (change_at, new_id, now, old.id),
                )
                _record_version(tx, old.id, old.root_id, old.user_id, old.version, "superseded", old.content,
                                json.dumps(old.metadata, sort_keys=True), reason, now)  # fmt: skip
        return new_id

    def forget(self, memory_id: int, *, user_id: str | None = None, reason: str | None = None,
               allow_immutable: bool = False) -> None:  # fmt: skip
        """Soft-delete: the memory leaves retrieval but stays in history."""
        old = self._current_for_change(memory_id, user_id, allow_immutable, "forget")
        now = iso(utcnow())
        with self.db.transaction() as tx:
            tx.execute("UPDATE memories SET active = 0, updated_at = ? WHERE id = ?", (now, old.id))
            _record_version(tx, old.id, old.root_id, old.user_id, old.version, "forgotten", old.content,
                            json.dumps(old.metadata, sort_keys=True), reason, now)  # fmt: skip

    def _current_for_change(self, memory_id: int, user_id: str | None, allow_immutable: bool, verb: str) -> Memory:
        memory = self.get(memory_id)
        if memory is None or (user_id is not None and memory.user_id != _norm_user(user_id)):
            # The same answer for "missing" and "someone else's": no probing other users' ids.
            raise StoreError(f"memory {memory_id} not found")
        if not memory.current:
            raise StoreError(f"memory {memory_id} is not current (superseded or forgotten); cannot {verb} it")
        if memory.immutable and not allow_immutable:
            raise StoreError(f"memory {memory_id} is immutable; only an operator can change it")
        return memory

    # -- reading ---------------------------------------------------------------------------------------

    def get(self, memory_id: int) -> Memory | None:
        """One memory row by id (any version, any state), or None."""
        row = self.db.query_one(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (int(memory_id),))
        return Memory.from_row(row) if row else None

    def get_all(
        self,
        user_id: str | None,
        *,
        scope: str | None = None,
        domain: str | None = None,
        type: str | None = None,
        include_inactive: bool = False,
        as_of: datetime | str | None = None,
        limit: int | None = None,
    ) -> list[Memory]:
        """The user's memories (current ones unless asked otherwise), newest first."""
        where, params = memory_filter(user_id, scope=scope, domain=domain, type=type,
                                      include_inactive=include_inactive, as_of=as_of)  # fmt: skip
        sql = f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE {where} ORDER BY m.valid_from DESC, m.id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
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

    def users(self) -> list[str]:
        """Every user with at least one memory or message."""
        rows = self.db.query(
            "SELECT user_id FROM memories WHERE user_id IS NOT NULL UNION SELECT user_id FROM messages ORDER BY 1"
        )
        return [r[0] for r in rows]

    def search(self, user_id: str | None, query: str, *, k: int = 10, **filters: Any) -> list[SearchHit]:
        """Hybrid retrieval for one user (see ``quinn.memory.search.hybrid_search``)."""
        from quinn.memory.search import hybrid_search

        return hybrid_search(self, user_id, query, k=k, **filters)

    # -- purge -----------------------------------------------------------------------------------------

    def purge(self, user_id: str) -> dict[str, int]:
        """Delete every trace of a user: memories, history, messages, sessions, state, summaries, outbox, graph.

        Full-text indexes are merged and the file vacuumed, so the user's text leaves the file's bytes.
        Returns the number of rows removed per table.
        """
        user = _norm_user(user_id)
        counts: dict[str, int] = {}
        with self.db.transaction() as tx:
            sessions = [r[0] for r in tx.query("SELECT id FROM sessions WHERE user_id = ?", (user,))]
            for table, where, params in (
                ("memories", "user_id = ?", (user,)),
                ("memory_versions", "user_id = ?", (user,)),
                ("messages", "user_id = ?", (user,)),
                ("session_ids", f"session_id IN ({','.join('?' * len(sessions)) or 'NULL'})", tuple(sessions)),
                ("sessions", "user_id = ?", (user,)),
                ("user_state", "user_id = ?", (user,)),
                ("conversation_summaries", "user_id = ?", (user,)),
                ("relationships", "user_id = ?", (user,)),
                ("entities", "user_id = ?", (user,)),
                ("outbox", "user_id = ?", (user,)),
                ("llm_usage", "user_id = ?", (user,)),
            ):
                counts[table] = int(tx.query(f"SELECT count(*) FROM {table} WHERE {where}", params)[0][0])
                tx.execute(f"DELETE FROM {table} WHERE {where}", params)
            # mail_state keeps no text, but its user column names the person: unlink it.
            counts["mail_state"] = int(tx.query("SELECT count(*) FROM mail_state WHERE user_id = ?", (user,))[0][0])
            tx.execute("UPDATE mail_state SET user_id = NULL, session_id = NULL WHERE user_id = ?", (user,))
        # FTS5 keeps deleted terms in its segments until they are merged: optimize rewrites them.
        self.db.executescript(
            "INSERT INTO memories_fts (memories_fts) VALUES ('optimize');"
            "INSERT INTO messages_fts (messages_fts) VALUES ('optimize');"
        )
        self.db.vacuum()
        log.info("purged user %s: %s", user, counts)
        return counts


def memory_filter(
    user_id: str | None,
    *,
    scope: str | None = None,
    domain: str | None = None,
    type: str | None = None,
    tags: Sequence[str] | None = None,
    tags_mode: str = "any",
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    min_importance: float | None = None,
    include_inactive: bool = False,
    include_global: bool = False,
    as_of: datetime | str | None = None,
    alias: str = "m",
) -> tuple[str, list[Any]]:
    """A parameterised WHERE clause for one user's memories; filters compose with AND."""
    a = alias
    clauses: list[str] = []
    params: list[Any] = []
    if user_id is None:
        clauses.append(f"{a}.user_id IS NULL")
    elif include_global:
        clauses.append(f"({a}.user_id = ? OR {a}.user_id IS NULL)")
        params.append(_norm_user(user_id))
    else:
        clauses.append(f"{a}.user_id = ?")
        params.append(_norm_user(user_id))
    if as_of is not None:
        moment = iso(as_of)
        clauses.append(f"{a}.valid_from <= ? AND ({a}.valid_to IS NULL OR {a}.valid_to > ?)")
        params += [moment, moment]
        if not include_inactive:
            clauses.append(f"{a}.active = 1")
    elif not include_inactive:
        clauses.append(
            f"{a}.active = 1 AND {a}.superseded_by IS NULL AND {a}.valid_to IS NULL"
            f" AND ({a}.expires_at IS NULL OR {a}.expires_at > ?)"
        )
        params.append(iso(utcnow()))
    for column, value in (("scope", scope), ("domain", domain), ("type", type)):
        if value is not None:
            clauses.append(f"{a}.{column} = ?")
            params.append(value)
    if tags:
        joiner = " AND " if tags_mode == "all" else " OR "
        clauses.append(
            "(" + joiner.join(f"EXISTS (SELECT 1 FROM json_each({a}.tags) WHERE value = ?)" for _ in tags) + ")"
        )
        params += list(tags)
    if since is not None:
        clauses.append(f"{a}.valid_from >= ?")
        params.append(iso(since))
    if until is not None:
        clauses.append(f"{a}.valid_from < ?")
        params.append(iso(until))
    if min_importance is not None:
        clauses.append(f"{a}.importance >= ?")
        params.append(float(min_importance))
    return " AND ".join(clauses), params


def _norm_user(user_id: str | None) -> str | None:
    return user_id.strip().lower() if user_id else None


def _check_new(item: NewMemory, index: int) -> None:
    where = f"memory #{index}"
    if not isinstance(item.content, str) or not item.content.strip():
        raise StoreError(f"{where}: content must be non-empty text")
    if item.scope not in SCOPES:
        raise StoreError(f"{where}: scope {item.scope!r} is not one of {', '.join(SCOPES)}")
    if not item.type or not item.type.replace("_", "").isalnum():
        raise StoreError(f"{where}: type {item.type!r} must be a word like fact or preference")
    if not 0.0 <= float(item.importance) <= 1.0:
        raise StoreError(f"{where}: importance {item.importance} must be between 0 and 1")
    if item.scope == "global" and item.user_id is not None:
        raise StoreError(f"{where}: global memories have no user")
    if item.scope != "global" and item.user_id is None:
        raise StoreError(f"{where}: scope {item.scope} needs a user")


def _record_version(
    tx: Transaction, memory_id: int, root_id: int, user_id: str | None, version: int, change: str, content: str,
    metadata: str, reason: str | None, now: str | None,
) -> None:  # fmt: skip
    tx.execute(
        "INSERT INTO memory_versions (memory_id, root_id, user_id, version, change, content, metadata, reason,"
        " changed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (memory_id, root_id, _norm_user(user_id), version, change, content, metadata, reason, now),
    )
