"""The one door to the database: the only module that imports the libSQL driver (quinn.db, issue 17).

The same code serves an embedded file (the default) and a remote libSQL server (``http://``, ``https://`` or
``libsql://`` with an auth token). The driver is synchronous and holds the GIL for a whole query, so every
statement runs under one lock, and async callers go through ``Database.run``, which uses one dedicated thread.
For the same reason a process must hold one connection per remote database: a second one that waits for the
first's write lock holds the GIL, so the first can never commit (until sqld's 5 s transaction timeout). The
daemon shares its one ``Database`` with every part; opening a second one to the same server is logged.
Schema changes are numbered migrations applied at open (``schema.migrate``); the DB thread is ``executor.py``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, ParamSpec, TypeVar

import libsql

from quinn.db import schema
from quinn.db.executor import DbThread
from quinn.errors import ConfigError, ConnectError, StoreError

log = logging.getLogger(__name__)

#: Checkpoint tries after a vacuum; each waits up to the connection's busy_timeout (5 s) for readers to finish.
CHECKPOINT_TRIES = 2

P = ParamSpec("P")
T = TypeVar("T")
Row = tuple[Any, ...]

REMOTE_SCHEMES = ("http://", "https://", "libsql://")
DriverError: type[Exception] = libsql.Error if isinstance(libsql.Error, type) else Exception


def is_remote(url: str) -> bool:
    """True for a libSQL server URL, False for a local file path."""
    return url.startswith(REMOTE_SCHEMES)


class Database:
    """A libSQL connection with one writer, numbered migrations, and an async door for the event loop."""

    _remote_open: ClassVar[Counter[str]] = Counter()  # open connections per remote URL, in this process
    _remote_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def connections_to(cls, url: str) -> int:
        """How many connections this process holds to the remote database at ``url``."""
        with cls._remote_lock:
            return cls._remote_open[url.rstrip("/")]

    def __init__(self, url: str, auth_token: str | None = None) -> None:
        self.url = url
        self.remote = is_remote(url)
        self._auth_token = auth_token
        self._lock = threading.RLock()
        self._local = threading.local()  # per thread: how deep inside transaction() blocks
        self._thread = DbThread()
        self._conn: Any = None
        self._counted = False  # this connection is in ``_remote_open``

    # -- lifecycle -------------------------------------------------------------------------------------

    @classmethod
    def open(cls, url: str, auth_token: str | None = None, *, migrate: bool = True) -> Database:
        """Connect and bring the schema up to date; errors name the URL and what to check."""
        db = cls(url, auth_token)
        db.connect()
        if migrate:
            db.migrate()
        return db

    def connect(self) -> None:
        """Open the connection (a file is created when missing; its folder must exist)."""
        if self.url.startswith(("ws://", "wss://")):
            # The driver silently treats ws:// as a local path (FACTS.md); refuse instead of creating a file.
            raise ConfigError(f"database.url {self.url}: ws:// is not supported", "use http(s):// or libsql://")
        try:
            if self.remote:
                self._conn = libsql.connect(self.url, auth_token=self._auth_token or "")
                self._conn.execute("SELECT 1").fetchall()
                self._count_remote(+1)
            else:
                path = Path(self.url).expanduser()
                if not path.parent.exists():
                    raise ConfigError(
                        f"database.url {self.url}: folder {path.parent} does not exist",
                        "create it, or point database.url at a writable folder",
                    )
                self._conn = libsql.connect(str(path))
                self._conn.execute("PRAGMA busy_timeout = 5000").fetchall()
                self._conn.execute("PRAGMA journal_mode = WAL").fetchall()
                self._conn.execute("PRAGMA foreign_keys = ON").fetchall()
        except ConfigError:
            raise
        except Exception as exc:  # the driver raises ValueError / RuntimeError / libsql.Error alike
            raise ConnectError(f"database {self.redacted_url}: cannot open: {exc}", "check database.url") from exc

    def _count_remote(self, change: int) -> None:
        self._counted = change > 0
        key = self.url.rstrip("/")
        with Database._remote_lock:
            Database._remote_open[key] += change
            count = Database._remote_open[key]
        if change > 0 and count > 1:
            log.warning("database %s: %d connections in this process; two can deadlock (the driver holds the GIL "
                        "while it waits for the other's write lock): share one Database",
                        self.redacted_url, count)  # fmt: skip

    @property
    def redacted_url(self) -> str:
        """The URL without credentials, for logs and errors."""
        return re.sub(r"//[^/@]*@", "//***@", self.url)

    def close(self) -> None:
        """Close the connection and the DB thread; safe to call twice."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None
                    if self._counted:
                        self._count_remote(-1)
        self._thread.shutdown()

    def migrate(self, target: int | None = None) -> int:
        """Apply every migration newer than the schema version (up to ``target``); returns the version
        (``schema.migrate``, under this connection's lock)."""
        with self._lock:
            return schema.migrate(self, target)

    def script(self, sql: str) -> None:
        """Run several statements, one by one: the driver's ``executescript`` can stop part way without an error
        (a failing statement in a local file; about 1 in 100 scripts against sqld, for no reason given), while
        ``execute`` raises on every failure. (Our migrations hold no vector-index DDL, which ``execute`` would
        build empty over a remote connection: FACTS.md.) Nothing is committed here: a migration carries its own
        BEGIN and COMMIT."""
        conn = self._require()
        for statement in schema.split_statements(sql):
            conn.execute(statement).fetchall()

    def rollback_quietly(self) -> None:
        """Roll back whatever is open, logging (not raising) a failure: the error being reported matters more."""
        try:
            self._require().rollback()
        except Exception as exc:  # the connection may be gone; the failure being reported matters more
            log.debug("rollback after a failed script: %s", exc)

    # -- statements ------------------------------------------------------------------------------------

    def _require(self) -> Any:
        if self._conn is None:
            raise StoreError("database is closed")
        return self._conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run a read and return all rows."""
        with self._lock:
            return list(self._require().execute(sql, tuple(params)).fetchall())

    def query_one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        """Run a read and return the first row, or None."""
        rows = self.query(sql, params)
        return rows[0] if rows else None

    def query_value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run a read and return the first column of the first row, or None."""
        row = self.query_one(sql, params)
        return row[0] if row else None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write in its own transaction; returns lastrowid."""
        with self.transaction() as tx:
            return tx.execute(sql, params)

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """A write transaction: committed when the block ends, rolled back on error."""
        with self._lock:
            conn = self._require()
            tx = Transaction(conn)
            self._local.depth = getattr(self._local, "depth", 0) + 1
            try:
                yield tx
            except BaseException:
                try:
                    conn.rollback()
                except Exception:  # rollback of a dead remote connection: the original error matters more
                    log.debug("rollback failed", exc_info=True)
                raise
            else:
                conn.commit()
            finally:
                self._local.depth -= 1

    def in_transaction(self) -> bool:
        """True inside a ``transaction()`` block of this thread (work handed to another thread would wait on it)."""
        return getattr(self._local, "depth", 0) > 0

    def executescript(self, sql: str) -> None:
        """Run several statements (DDL, maintenance) and commit."""
        with self._lock:
            self.script(sql)
            self._require().commit()

    def merge_text_indexes(self) -> None:
        """Merge every FTS5 index: FTS5 keeps deleted terms in its segments until they are merged, and
        ``optimize`` rewrites them, so deleted text leaves the file (after a purge, after retention)."""
        indexes = self.query("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%'")
        self.executescript("".join(f"INSERT INTO {name} ({name}) VALUES ('optimize');" for (name,) in indexes))

    def vacuum(self, checkpoint_tries: int = CHECKPOINT_TRIES) -> bool:
        """Rebuild the file so deleted data leaves its bytes (local files only), then copy the write-ahead log
        into it and empty the log. Returns whether the bytes were reached: False when another connection (a
        backup, a separate `quinn console`, Litestream) held a read transaction through every try, so the
        checkpoint could not finish and the main file still holds the old pages until a later checkpoint does
        (measured: ``wal_checkpoint(TRUNCATE)`` answers busy after ``busy_timeout``, the marker still in the
        file). A remote database compacts on its server: True, nothing more can be done from here."""
        if self.remote:
            return True
        with self._lock:
            conn = self._require()
            conn.commit()
            conn.execute("VACUUM").fetchall()
            for attempt in range(1, checkpoint_tries + 1):
                busy, log_frames, done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
                if not busy:  # TRUNCATE: every frame copied and the log emptied
                    return True
                log.warning("the checkpoint after a vacuum was blocked by a reader (try %d of %d: %s of %s log "
                            "frames copied)", attempt, checkpoint_tries, done, log_frames)  # fmt: skip
            return False

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run blocking database work on the DB thread, so the event loop never waits on the driver."""
        return await self._thread.run(fn, *args, **kwargs)


class Transaction:
    """Statements inside one ``Database.transaction`` block."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; returns lastrowid."""
        cursor = self._conn.execute(sql, tuple(params))
        return int(cursor.lastrowid or 0)

    def delete(self, table: str, where: str, params: Sequence[Any] = ()) -> int:
        """Delete the rows of ``table`` matching ``where`` (SQL of the caller's, never user text); returns how
        many, counted first (the driver's rowcount is not relied upon)."""
        count = int(self.query(f"SELECT count(*) FROM {table} WHERE {where}", params)[0][0])
        self.execute(f"DELETE FROM {table} WHERE {where}", params)
        return count

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows."""
        self._conn.executemany(sql, [tuple(r) for r in rows])

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Read inside the transaction (sees its own writes)."""
        return list(self._conn.execute(sql, tuple(params)).fetchall())
