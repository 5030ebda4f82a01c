"""The map of personal data (issue 35) against the real schema: every migration applied on a libSQL file, every
table and every column that can hold text declared in ``quinn.agent.personal_data.MAP``, so a new table or column
that can hold a person's words fails here until someone says what forget, stop, export, purge, retention and
"what do you know" do to it."""

from __future__ import annotations

import importlib
from pathlib import Path

from quinn.agent import personal_data
from quinn.db import Database

NUMERIC = ("INTEGER", "REAL")  # a number holds no words; everything else (TEXT, BLOB, F32_BLOB, untyped) may


def real_schema(path: Path) -> dict[str, dict[str, str]]:
    """Every table of a database built by every migration: its columns and their declared types."""
    db = Database.open(str(path))
    try:
        tables = [r[0] for r in db.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: {str(c): str(k or "") for c, k in db.query("SELECT name, type FROM pragma_table_info(?)", (t,))}
                for t in tables}  # fmt: skip
    finally:
        db.close()


def test_every_table_and_text_column_of_the_real_schema_is_in_the_map(tmp_path: Path) -> None:
    schema = real_schema(tmp_path / "quinn.db")
    assert set(schema) - set(personal_data.BY_TABLE) == set(), "tables missing from quinn/agent/personal_data.py"
    undeclared = {
        f"{table}.{column}"
        for table, columns in schema.items()
        for column, kind in columns.items()
        if kind.upper() not in NUMERIC and column not in personal_data.BY_TABLE[table].columns
    }
    assert undeclared == set(), "text or blob columns the map does not declare"


def test_the_map_names_nothing_the_schema_lacks(tmp_path: Path) -> None:
    schema = real_schema(tmp_path / "quinn.db")
    stale = {f"{h.table}.{c}" for h in personal_data.MAP for c in h.columns if c not in schema.get(h.table, {})}
    assert set(personal_data.BY_TABLE) - set(schema) == set()
    assert stale == set()


def test_a_table_holding_a_persons_words_says_what_each_promise_does_and_its_owner_purges_it() -> None:
    """Words of a person are deleted by a ``purge_user`` of the owner the map names (or the map says why not)."""
    for holder in personal_data.MAP:
        if "words" not in holder.columns.values() and "bytes" not in holder.columns.values():
            continue
        for promise in ("forget", "stop", "export", "purge", "retention", "see"):
            assert getattr(holder, promise).strip(), f"{holder.table}: what does {promise} do?"
        importlib.import_module(holder.owner)
        if holder.purge.startswith("deleted"):
            module = importlib.import_module(holder.purger)
            assert hasattr(module, "purge_user"), f"{holder.table}: {holder.purger} has no purge_user"


def test_the_map_is_listed_in_the_security_guide() -> None:
    """deploy/SECURITY.md shows the map as it is (regenerate: ``personal_data.markdown_table()``)."""
    guide = (Path(__file__).resolve().parents[2] / "deploy" / "SECURITY.md").read_text(encoding="utf-8")
    assert personal_data.markdown_table() in guide, "deploy/SECURITY.md's map of personal data is out of date"
