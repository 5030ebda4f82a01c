"""Groups of similar memories of one user, by their stored vectors (consolidation and reflection use them).

Vectors are read back from the database (no re-embedding) and compared with numpy: one user's current memories
fit in memory easily (FACTS.md: numpy on a per-user matrix takes 0.01-0.1 ms per query).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from quinn.memory.models import MEMORY_COLUMNS, Memory
from quinn.memory.store import MemoryStore, memory_filter


def current_with_vectors(
    store: MemoryStore, user_id: str, *, exclude_types: Collection[str] = (), **filters: Any
) -> tuple[list[Memory], np.ndarray]:
    """The user's current memories that carry a vector of the configured model, and those vectors (n, dim)."""
    if store.embedder is None:
        return [], np.zeros((0, 0), dtype=np.float32)
    where, params = memory_filter(user_id, **filters)
    rows = store.db.query(
        f"SELECT {MEMORY_COLUMNS}, embedding FROM memories m"
        f" WHERE {where} AND m.embedding_model = ? AND m.embedding IS NOT NULL ORDER BY m.id",
        [*params, store.embedder.model_id],
    )
    memories: list[Memory] = []
    vectors: list[np.ndarray] = []
    for row in rows:
        memory = Memory.from_row(row[:-1])
        if memory.type in exclude_types:
            continue
        vector = np.frombuffer(bytes(row[-1]), dtype=np.float32)
        if vector.shape != (store.embedder.dim,):
            continue  # a blob of another size cannot be compared (F32_BLOB accepts any length: FACTS.md)
        memories.append(memory)
        vectors.append(vector)
    if not vectors:
        return [], np.zeros((0, store.embedder.dim), dtype=np.float32)
    return memories, np.vstack(vectors)


def similar_groups(
    memories: Sequence[Memory], vectors: np.ndarray, threshold: float, min_size: int
) -> list[list[Memory]]:
    """Groups of at least ``min_size`` memories, each within ``threshold`` cosine similarity of its seed.

    Greedy and deterministic: the memory with the most close neighbours seeds the first group (its unassigned
    neighbours join it), and so on, so every memory is in at most one group. Vectors are unit length.
    """
    if len(memories) < min_size:
        return []
    similarity = vectors @ vectors.T
    close = similarity >= threshold
    np.fill_diagonal(close, True)
    order = sorted(range(len(memories)), key=lambda i: (-int(close[i].sum()), memories[i].id))
    taken: set[int] = set()
    groups: list[list[Memory]] = []
    for seed in order:
        if seed in taken:
            continue
        members = [int(j) for j in np.flatnonzero(close[seed]) if j not in taken]
        if len(members) < min_size:
            continue
        taken.update(members)
        groups.append([memories[j] for j in sorted(members, key=lambda j: memories[j].id)])
    return groups
