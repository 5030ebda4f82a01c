"""Users' vectors held in memory, so a vector search is one numpy product instead of a SQL scan.

Measured (FACTS.md): the exact SQL scan costs 3.5 ms per search at 1k rows per user and 164 ms for one user with
100k rows; numpy on the same vectors 0.01-13.5 ms. A cached matrix stays coherent through the one-row
``memory_vector_stamp`` (migration 0003), which triggers bump for every writer: new rows are fetched and
appended, any vector change or delete reloads the matrix. What is cached is every row of the user with a vector
of the model (all versions and states): the search's filters are applied in SQL to the best candidates.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from quinn.db import Database

VECTOR_CACHE_MB = 256  # 100k memories of 384 float32 dimensions take 154 MB


@dataclass
class _Entry:
    ids: np.ndarray  # int64, ascending
    matrix: np.ndarray  # float32 (len(ids), dim), unit rows
    inserts: int
    changes: int

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.matrix.nbytes)


class VectorCache:
    """Per (user, model) matrices, least recently used dropped first once ``max_mb`` is exceeded."""

    TABLE = "memories"  # the rows whose vectors are cached, with user_id, embedding and embedding_model
    STAMP = "memory_vector_stamp"  # the change stamp its triggers bump

    def __init__(self, max_mb: float = VECTOR_CACHE_MB) -> None:
        self.max_bytes = int(max_mb * 1024 * 1024)
        self._entries: OrderedDict[tuple[str | None, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def vectors(self, db: Database, user_id: str | None, model_id: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, matrix) of the user's rows (``None``: the global ones) that carry a ``dim``-long vector of
        ``model_id``, current with the database. Raises ``LookupError`` when they do not fit in the cache."""
        key = (user_id, model_id)
        # The stamp is read before the rows: a write in between makes the next call refresh, never miss it.
        stamp = db.query_one(f"SELECT inserts, changes FROM {self.STAMP} WHERE id = 1") or (0, 0)
        inserts, changes = int(stamp[0]), int(stamp[1])
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and (entry.inserts, entry.changes) == (inserts, changes):
            with self._lock:
                self._entries.move_to_end(key, last=True)
            return entry.ids, entry.matrix
        after = int(entry.ids[-1]) if entry is not None and entry.changes == changes and len(entry.ids) else None
        ids, matrix = self._load(db, user_id, model_id, dim, after)
        if entry is not None and after is not None:
            ids, matrix = np.concatenate([entry.ids, ids]), np.concatenate([entry.matrix, matrix])
        fresh = _Entry(ids, matrix, inserts, changes)
        with self._lock:
            self._entries.pop(key, None)
            if fresh.nbytes > self.max_bytes:
                raise LookupError(f"{len(ids)} vectors do not fit in {self.max_bytes >> 20} MiB")
            self._entries[key] = fresh
            while sum(e.nbytes for e in self._entries.values()) > self.max_bytes:
                self._entries.popitem(last=False)
        return ids, matrix

    def forget(self, user_id: str | None) -> None:
        """Drop the user's matrices now (after a purge: their vectors should not outlive their rows)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == user_id]:
                del self._entries[key]

    def _load(
        self, db: Database, user_id: str | None, model_id: str, dim: int, after: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        rows = db.query(
            f"SELECT id, embedding FROM {self.TABLE} WHERE user_id IS ? AND embedding_model = ?"
            " AND length(embedding) = ? AND id > ? ORDER BY id",
            (user_id, model_id, dim * 4, after or 0),
        )
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32)
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim).copy()
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0  # vector_distance_cos is a cosine: compare directions, whatever the length
        return ids, matrix / norms


class PassageVectors(VectorCache):
    """The same cache for conversation passages (migration 0008), which are only ever inserted or deleted."""

    TABLE = "passages"
    STAMP = "passage_vector_stamp"
