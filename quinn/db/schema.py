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
import time
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
#: exists") is, on a shared server, most likely another daemon's migration half way through.
ALREADY_THERE = re.compile(r"duplicate column name|already exists", re.IGNORECASE)
#: How long such a daemon is given to finish its migration before this one reports the failure.
OVERTAKEN_WAIT_S = 30.0


def migrate(db: Scriptable, target: int | None = None, wait_s: float = OVERTAKEN_WAIT_S) -> int:
    """Apply every migration newer than ``PRAGMA user_version`` (up to ``target``); returns the version.

    A database written by a newer Quinn is refused rather than used: its schema may hold what this code
    would silently drop. When a migration fails because what it creates already exists, another daemon on the
    same server is taken to be applying it (seen against sqld under load: its statements were visible before its
    version bump) and is given ``wait_s`` seconds to finish. If it does not, this daemon completes the migration
    itself, skipping the statements whose work is already there: every migration's data statements are written to
    be run twice (``INSERT OR IGNORE``, an ``UPDATE`` to a value that does not depend on the row's old one).
    """
    available = migration_scripts()
    latest = available[-1][0] if available else 0
    current = int(db.query_value("PRAGMA user_version") or 0)
    if current > latest:
        raise StoreError(
            f"database {db.redacted_url} has schema version {current}, newer than this Quinn's {latest}",
            "upgrade quinn, or restore a backup made before the upgrade",
        )
    started = current
    for version, sql in available:
        if version <= current or (target is not None and version > target):
            continue
        # One line per migration at DEBUG, one summary at INFO: a new database took 20 lines (issue 34).
        log.debug("database %s: applying migration %04d", db.redacted_url, version)
        # One transaction: a migration that fails half way leaves nothing behind, so a retry starts clean.
        try:
            db.script(f"BEGIN;\n{sql}\nPRAGMA user_version = {version};\nCOMMIT;")
        except Exception as exc:
            db.rollback_quietly()
            half_applied = bool(ALREADY_THERE.search(str(exc)))
            if _applied_elsewhere(db, version, wait_s if half_applied else 0.0):
                # Another daemon on the same server applied it meanwhile (several started at once).
                log.info("database %s: migration %04d was applied by another process", db.redacted_url,
                         version)  # fmt: skip
                current = version
                continue
            if half_applied:
                current = _complete(db, version, sql)
                continue
            raise StoreError(
                f"database {db.redacted_url}: migration {version:04d} failed: {exc}",
                "nothing of it was applied; fix the cause and start Quinn again",
            ) from exc
        found = int(db.query_value("PRAGMA user_version") or 0)
        if found < version:  # cannot happen while every statement raises on failure: checked anyway
            raise StoreError(
                f"database {db.redacted_url}: migration {version:04d} ran, but the schema version reads {found}",
                "start Quinn again; if it repeats, restore a backup and report it",
            )
        if found > version:  # another daemon on the same server applied the next ones meanwhile
            log.info("database %s: migrations up to %04d were applied by another process", db.redacted_url, found)
        current = found
    if current > started:
        log.info("database %s: schema brought from version %d to %d", db.redacted_url, started, current)
    return current


def _complete(db: Scriptable, version: int, sql: str) -> int:
    """Finish a migration whose work is partly in the database and whose version bump is not (another daemon
    stopped half way, or its transaction was not kept whole by the server), in one transaction; returns the
    version."""
    skipped: list[str] = []
    try:
        db.script("BEGIN;")
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
    log.warning("database %s: migration %04d was half applied (by another process that did not finish it); "
                "completed it, skipping what was already there: %s", db.redacted_url, version,
                "; ".join(skipped))  # fmt: skip
    return version


def _applied_elsewhere(db: Scriptable, version: int, wait_s: float) -> bool:
    """Whether the schema version reaches ``version`` now, or (another daemon mid-migration) within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    if wait_s > 0:
        log.info("database %s: migration %04d looks half applied by another process; waiting up to %.0f s for it",
                 db.redacted_url, version, wait_s)  # fmt: skip
    while True:
        if int(db.query_value("PRAGMA user_version") or 0) >= version:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
