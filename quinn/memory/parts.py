"""What search.py and records.py use of a ``MemoryStore``, as a Protocol.

They take the store as their first argument, and ``MemoryStore`` calls them for ``search``, ``find_similar``,
``export`` and ``import_``: typed against this Protocol they need not import store.py, which imports them, so
the memory package has no import circle (issue 17). ``MemoryStore`` is the one implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import Any, Protocol, TypeVar

import numpy as np

from quinn.db import Database
from quinn.memory.conversations import ConversationCache
from quinn.memory.embed import Embedder
from quinn.memory.models import Memory
from quinn.memory.vectors import VectorCache

T = TypeVar("T")


class StoreParts(Protocol):
    """The attributes and methods of ``MemoryStore`` that retrieval, export and import read."""

    db: Database
    embedder: Embedder | None
    vector_cache: VectorCache | None
    conversations: ConversationCache

    def first_time(self, key: str) -> bool: ...

    def in_background(self, fn: Callable[..., T], *args: Any) -> Future[T]: ...

    def record_access(self, memory_ids: Sequence[int], now: datetime | str | None = None) -> None: ...

    def vectors(self, texts: Sequence[str]) -> np.ndarray | None: ...

    def get_all(self, user_id: str | None, *, limit: int | None = None, **filters: Any) -> list[Memory]: ...


def run_now(fn: Callable[..., T], *args: Any) -> Future[T]:
    """``fn(*args)`` run on this thread, as a finished future (the shape ``StoreParts.in_background`` returns)."""
    done: Future[T] = Future()
    try:
        done.set_result(fn(*args))
    except Exception as exc:
        done.set_exception(exc)
    return done
