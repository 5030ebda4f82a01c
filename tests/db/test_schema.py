"""quinn/db's schema (issue 17): the migrations moved from quinn/memory/ to quinn/db/ unchanged, with the same
numbering and the same bookkeeping (``PRAGMA user_version``), so a database an earlier Quinn migrated opens
without running any of them again. Real libSQL files in temporary folders."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from quinn.db import Database, migration_scripts
from quinn.db.schema import migrate, split_statements
from quinn.errors import StoreError

# sqlite_master of a database migrated by the old layout (quinn/memory/migrations/ at 19fe6ba), written once by
# that code: the schema every existing installation has today.
OLD_LAYOUT = json.loads((Path(__file__).parent / "schema_0016.json").read_text(encoding="utf-8"))


def schema_of(db: Database) -> list[list[Any]]:
    """Every table, index, trigger and view as sqlite_master records it (the SQL text included)."""
    return [list(row) for row in db.query("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")]


def test_the_migrations_keep_their_numbering() -> None:
    versions = [version for version, _sql in migration_scripts()]
    assert versions[: OLD_LAYOUT["user_version"]] == list(range(1, OLD_LAYOUT["user_version"] + 1))


def test_the_moved_migrations_build_exactly_the_schema_the_old_layout_built(tmp_path: Path) -> None:
    db = Database.open(str(tmp_path / "quinn.db"), migrate=False)
    try:
        assert db.migrate(target=OLD_LAYOUT["user_version"]) == OLD_LAYOUT["user_version"]
        assert schema_of(db) == OLD_LAYOUT["sqlite_master"]
    finally:
        db.close()


def test_an_already_migrated_database_opens_without_running_a_migration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "quinn.db")
    with caplog.at_level(logging.INFO, logger="quinn.db"):
        first = Database.open(path)
    # A new database says so in one line, not one per migration (issue 34: 20 lines on a newcomer's first run).
    latest = len(migration_scripts())
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "database" in r.getMessage()]
    assert said == [f"database {path}: schema brought from version 0 to {latest}"], said
    caplog.clear()
    version = first.query_value("PRAGMA user_version")
    first.execute("INSERT INTO memory_consent (user_id, opted_out_at) VALUES (?, ?)", ("alice", "2026-11-24"))
    first.close()

    with caplog.at_level(logging.INFO, logger="quinn.db"):
        again = Database.open(path)
    try:
        assert [r.getMessage() for r in caplog.records if "migration" in r.getMessage()] == []
        assert again.query_value("PRAGMA user_version") == version == len(migration_scripts())
        assert again.query("SELECT user_id FROM memory_consent") == [("alice",)]  # the data stayed
    finally:
        again.close()


def test_every_table_a_migration_creates_has_an_owner_in_the_architecture_page() -> None:
    """docs/architecture.md's picture names the owner of every table, as datasette's docs name every setting."""
    created = set()
    for _version, sql in migration_scripts():
        created |= set(re.findall(r"CREATE (?:VIRTUAL )?TABLE (?:IF NOT EXISTS )?(\w+)", sql, flags=re.IGNORECASE))
    page = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    picture = page.split("## Layers and owners", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"\b[a-z]+(?:_[a-z]+)*\b", picture))
    assert created - named == set(), "tables without an owner in docs/architecture.md's picture"


class Overtaken:
    """A connection before each of whose migrations another daemon, on its own connection to the same database,
    applies the next ``steps`` ones: two daemons started at once on one libSQL server (CI,
    tests/proof/test_two_daemons)."""

    def __init__(self, mine: Database, other: Database, steps: int = 1) -> None:
        self.mine, self.other, self.steps = mine, other, steps

    @property
    def redacted_url(self) -> str:
        return self.mine.redacted_url

    def query_value(self, sql: str, params: Any = ()) -> Any:
        return self.mine.query_value(sql, params)

    def rollback_quietly(self) -> None:
        self.mine.rollback_quietly()

    def script(self, sql: str) -> None:
        if sql.startswith("BEGIN"):  # between two of mine, while mine holds no lock
            migrate(self.other, target=int(self.other.query_value("PRAGMA user_version")) + self.steps)
        self.mine.script(sql)


def test_a_daemon_overtaken_by_another_mid_migration_goes_on_from_where_the_other_got(tmp_path: Path) -> None:
    path = str(tmp_path / "quinn.db")
    mine, other = Database.open(path, migrate=False), Database.open(path, migrate=False)
    try:
        assert migrate(Overtaken(mine, other)) == len(migration_scripts())
        assert other.query_value("PRAGMA user_version") == len(migration_scripts())
        assert schema_of(mine) == schema_of(other)
    finally:
        mine.close()
        other.close()


def test_a_daemon_behind_another_never_moves_the_schema_version_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The two-daemon proof failed under load: the daemon behind re-ran migration 0016 (only CREATE ... IF NOT
    EXISTS, so nothing failed) and set the version to 16 over the other's 24; at 0017 the column was there and the
    version said it was not. Each migration now reads the version under the write lock first."""
    path = str(tmp_path / "quinn.db")
    mine, other = Database.open(path, migrate=False), Database.open(path, migrate=False)
    try:
        migrate(mine, target=15)
        with caplog.at_level(logging.INFO, logger="quinn.db.schema"):
            assert migrate(Overtaken(mine, other, steps=len(migration_scripts()))) == len(migration_scripts())
        assert mine.query_value("PRAGMA user_version") == len(migration_scripts())
        assert f"schema brought from version 15 to {len(migration_scripts())} by another process" in caplog.text
        assert "partly in the database already" not in caplog.text
    finally:
        mine.close()
        other.close()


def half_applied(path: str, version: int) -> Database:
    """A database at ``version - 1`` holding part of migration ``version``'s work (its first statement): what a
    daemon of an older Quinn that moved the version back left behind."""
    db = Database.open(path, migrate=False)
    migrate(db, target=version - 1)
    db.script(split_statements(dict(migration_scripts())[version])[0])
    return db


def test_a_half_applied_migration_is_completed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mine = half_applied(str(tmp_path / "quinn.db"), 5)
    clean = Database.open(str(tmp_path / "clean.db"), migrate=False)
    try:
        with caplog.at_level(logging.WARNING, logger="quinn.db.schema"):
            assert migrate(mine, target=5) == 5
        assert "migration 0005 was partly in the database already" in caplog.text
        assert "ALTER TABLE mail_state ADD COLUMN thread_key TEXT" in caplog.text
        migrate(clean, target=5)
        assert schema_of(mine) == schema_of(clean)
        # and the rest goes on from there
        assert migrate(mine) == len(migration_scripts())
    finally:
        mine.close()
        clean.close()


def test_a_migration_that_fails_for_any_other_reason_is_reported_at_once(tmp_path: Path) -> None:
    mine = Database.open(str(tmp_path / "quinn.db"), migrate=False)
    try:
        migrate(mine, target=4)
        mine.script("CREATE TABLE mail_state_backup AS SELECT * FROM mail_state; DROP TABLE mail_state;")
        with pytest.raises(StoreError, match=r"migration 0005 failed: .*no such table: mail_state"):
            migrate(mine, target=5)
        assert mine.query_value("PRAGMA user_version") == 4
    finally:
        mine.close()


def test_every_migration_can_be_completed_over_its_own_work(tmp_path: Path) -> None:
    """What a daemon does with a migration another left half done (``schema._complete``) works for each: its
    statements run again over their own work change neither the schema nor the rows."""
    from quinn.db.schema import _complete

    db = Database.open(str(tmp_path / "quinn.db"), migrate=False)
    try:
        for version, sql in migration_scripts():
            migrate(db, target=version)
            before = schema_of(db), table_rows(db)
            assert _complete(db, version, sql) == version
            assert (schema_of(db), table_rows(db)) == before, f"migration {version:04d} run twice changed the database"
    finally:
        db.close()


def table_rows(db: Database) -> dict[str, int]:
    tables = [
        r[0] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE '%VIRTUAL%'")
    ]
    return {t: int(db.query_value(f'SELECT count(*) FROM "{t}"')) for t in tables}
