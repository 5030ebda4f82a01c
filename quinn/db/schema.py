"""The schema: the numbered migration scripts (``migrations/NNNN_*.sql``, one sequence for every package's
tables) and their runner.

Bookkeeping is ``PRAGMA user_version``: the number of the last migration applied. A database is brought up to
date at open, one migration per transaction with its version bump, so a failed one leaves nothing behind; a
database newer than the code is refused. The scripts moved here from ``quinn/memory/`` (issue 17) unchanged,
so a database any earlier Quinn migrated opens without running anything again (tests/db/test_schema.py).
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Sequence
from importlib import resources
from typing import Any, Protocol

from quinn.errors import StoreError

log = logging.getLogger(__name__)


class Scriptable(Protocol):
    """What the runner needs of a connection (``Database``, which holds its lock meanwhile)."""

    @property
    def redacted_url(self) -> str: ...

    def query_value(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    def script(self, sql: str) -> None: ...

    def rollback_quietly(self) -> None: ...


def migration_scripts() -> list[tuple[int, str]]:
    """The numbered migration scripts shipped in this package, in order: (version, sql)."""
    found = []
    for entry in resources.files("quinn.db").joinpath("migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_[a-z0-9_]+\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    if [v for v, _ in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..n: {[v for v, _ in found]}")
    return found


def split_statements(sql: str) -> list[str]:
    """The complete statements of a script, in order (a trigger's body stays whole); comments and blank text
    between statements are dropped."""
    statements: list[str] = []
    pending = ""
    for piece in re.split(r"(?<=;)", sql):  # every piece ends at a semicolon: one may end a statement
        pending += piece
        if sqlite3.complete_statement(pending):
            statement = _without_comments(pending)
            if statement:
                statements.append(statement)
            pending = ""
    if _without_comments(pending):
        raise StoreError(f"SQL script ends inside a statement: {pending.strip()[:80]!r}")
    return statements


def _without_comments(text: str) -> str:
    """``text`` stripped, or "" when it holds only ``--`` comments and whitespace."""
    code = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("--")]
    return text.strip() if code else ""


#: A migration that fails because what it creates is already there ("duplicate column name: x", "table x already
#: exists") while the schema version says it was never applied: a database whose version an older Quinn moved
#: back (two daemons migrating at once could do so), or a migration whose transaction the server did not keep whole.
ALREADY_THERE = re.compile(r"duplicate column name|already exists", re.IGNORECASE)


def migrate(db: Scriptable, target: int | None = None) -> int:
    """Apply every migration newer than ``PRAGMA user_version`` (up to ``target``); returns the version.

    A database written by a newer Quinn is refused rather than used: its schema may hold what this code
    would silently drop. Several daemons may start at once on one server: each migration takes the write lock
    first (``BEGIN IMMEDIATE``) and reads the version again under it, so a migration another daemon applied
    meanwhile is skipped and the version never moves back. A migration whose work is partly in the database
    already (``ALREADY_THERE``) is completed, skipping what is there: every migration's data statements are
    written to be run twice (``INSERT OR IGNORE``, an ``UPDATE`` to a value that does not depend on the old one).
    """
    available = migration_scripts()
    latest = available[-1][0] if available else 0
    current = _version(db)
    if current > latest:
        raise StoreError(
            f"database {db.redacted_url} has schema version {current}, newer than this Quinn's {latest}",
            "upgrade quinn, or restore a backup made before the upgrade",
        )
    started, by_others = current, 0
    for version, sql in available:
        if version <= current or (target is not None and version > target):
            continue
        # One line per migration at DEBUG, one summary at INFO: a new database took 20 lines (issue 34).
        log.debug("database %s: applying migration %04d", db.redacted_url, version)
        # One transaction: a migration that fails half way leaves nothing behind, so a retry starts clean.
        try:
            db.script("BEGIN IMMEDIATE;")
            found = _version(db)
            if found >= version:  # another daemon on the same server applied it (and maybe more) meanwhile
                db.script("ROLLBACK;")
                log.debug("database %s: migrations up to %04d were applied by another process", db.redacted_url,
                          found)  # fmt: skip
                by_others += found - current
                current = found
                continue
            db.script(f"{sql}\nPRAGMA user_version = {version};\nCOMMIT;")
        except Exception as exc:
            db.rollback_quietly()
            found = _version(db)
            if found >= version:  # the server gave the lock to another daemon, which applied it
                log.debug("database %s: migration %04d was applied by another process", db.redacted_url, version)
                by_others += found - current
                current = found
                continue
            if ALREADY_THERE.search(str(exc)):
                current = _complete(db, version, sql)
                continue
            raise StoreError(
                f"database {db.redacted_url}: migration {version:04d} failed: {exc}",
                "nothing of it was applied; fix the cause and start Quinn again",
            ) from exc
        found = _version(db)
        if found < version:  # cannot happen while every statement raises on failure: checked anyway
            raise StoreError(
                f"database {db.redacted_url}: migration {version:04d} ran, but the schema version reads {found}",
                "start Quinn again; if it repeats, restore a backup and report it",
            )
        current = found
    if current > started:
        who = ""
        if by_others == current - started:
            who = " by another process"
        elif by_others:
            who = f" ({by_others} of the migrations by another process)"
        log.info("database %s: schema brought from version %d to %d%s", db.redacted_url, started, current, who)
    return current


def _complete(db: Scriptable, version: int, sql: str) -> int:
    """Finish a migration whose work is partly in the database and whose version bump is not (``ALREADY_THERE``),
    in one transaction; returns the version."""
    skipped: list[str] = []
    try:
        db.script("BEGIN IMMEDIATE;")
        found = _version(db)
        if found >= version:  # another daemon completed it meanwhile
            db.script("ROLLBACK;")
            return found
        for statement in split_statements(sql):
            try:
                db.script(statement)
            except Exception as exc:
                if not ALREADY_THERE.search(str(exc)):
                    raise
                code = [line for line in statement.splitlines() if line.strip() and not line.strip().startswith("--")]
                skipped.append(code[0].strip()[:80])
        db.script(f"PRAGMA user_version = {version};\nCOMMIT;")
    except Exception as exc:
        db.rollback_quietly()
        raise StoreError(
            f"database {db.redacted_url}: migration {version:04d} is half applied and could not be completed: {exc}",
            "restore a backup made before the upgrade, or report it with this message",
        ) from exc
    log.warning("database %s: migration %04d was partly in the database already, under an older schema version; "
                "completed it, skipping what was there: %s", db.redacted_url, version, "; ".join(skipped))  # fmt: skip
    return version


def _version(db: Scriptable) -> int:
    """The schema version the database holds (``PRAGMA user_version``)."""
    return int(db.query_value("PRAGMA user_version") or 0)
