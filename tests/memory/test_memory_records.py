"""Export and import: JSON and YAML documents that validate against memory.schema.json, history included."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
import yaml

from quinn.errors import StoreError
from quinn.memory import MemoryStore
from quinn.memory.records import record_schema

ALICE = "alice@example.test"
BOB = "bob@example.test"
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "quinn" / "memory" / "memory.schema.json"


def _alice(store: MemoryStore) -> dict[str, int]:
    """A user with every kind of row: versions, a forgotten memory, JSON content, an immutable one, metadata."""
    first = store.add(ALICE, "Project Alpha deadline is June 30", scope="domain", type="fact", domain="work",
                      tags=["alpha"], metadata={"source": {"message_id": "<a@x>"}, "confidence": 0.7},
                      valid_from="2026-05-02T09:00:00Z")  # fmt: skip
    second = store.update(first, "Project Alpha deadline moved to July 15", valid_from="2026-06-10T14:00:00Z")
    gone = store.add(ALICE, "Alice's old phone number is 555-0100", type="personal")
    store.forget(gone, reason="user asked")
    plan = store.add(ALICE, {"trip": "Lisbon", "nights": 7}, scope="episodic", type="goal",
                     expires_at="2099-01-01")  # fmt: skip
    allergy = store.add(ALICE, "Alice is allergic to peanuts", type="personal", immutable=True, importance=1.0)
    store.search(ALICE, "peanut allergy", k=1)  # access statistics are part of the record too
    store.add(BOB, "Bob's deadline is unrelated")
    return {"first": first, "second": second, "gone": gone, "plan": plan, "allergy": allergy}


def test_the_schema_file_is_valid_json_schema():
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {"const": 1, "description": "Version of this file format."}
    assert schema["$defs"]["memory"]["properties"]["schema_version"]["const"] == 1


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_export_is_every_row_of_the_user_and_validates(store: MemoryStore, fmt: str):
    ids = _alice(store)
    text = store.export(ALICE, format=fmt)
    document = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    jsonschema.validate(document, record_schema())
    assert document["user_id"] == ALICE and document["schema_version"] == 1
    records = document["memories"]
    assert [r["id"] for r in records] == sorted(ids.values())
    assert {r["user_id"] for r in records} == {ALICE}  # nothing of Bob's
    by_id = {r["id"]: r for r in records}
    assert by_id[ids["first"]]["superseded_by"] == ids["second"]
    assert by_id[ids["second"]]["root_id"] == ids["first"]
    assert by_id[ids["gone"]]["active"] is False
    assert by_id[ids["plan"]]["content"] == {"trip": "Lisbon", "nights": 7}
    assert by_id[ids["allergy"]]["immutable"] is True and by_id[ids["allergy"]]["access_count"] == 1
    assert by_id[ids["first"]]["metadata"] == {"source": {"message_id": "<a@x>"}, "confidence": 0.7}
    assert isinstance(by_id[ids["first"]]["valid_from"], str)  # YAML keeps times as text, not date objects


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_import_into_a_fresh_database_restores_everything(
    store: MemoryStore, open_store: Callable[..., MemoryStore], tmp_path: Path, fmt: str
):
    _alice(store)
    text = store.export(ALICE, format=fmt)
    fresh = open_store(url=str(tmp_path / f"fresh-{fmt}.db"))
    assert fresh.import_(text) == {"imported": 5, "skipped": 0}

    def view(s: MemoryStore, **filters) -> list[tuple]:
        return [(m.uid, m.version, m.value, m.tags, m.metadata, m.importance, m.valid_from, m.valid_to, m.active,
                 m.immutable, m.expires_at, m.access_count, m.stability, m.created_at)
                for m in sorted(s.get_all(ALICE, **filters), key=lambda m: m.uid)]  # fmt: skip

    for filters in ({}, {"include_inactive": True}, {"as_of": "2026-06-01"}):
        assert view(fresh, **filters) == view(store, **filters)
    [current] = [m for m in fresh.get_all(ALICE) if "Alpha" in m.content]
    assert [m.content for m in fresh.history(current.id)] == [
        "Project Alpha deadline is June 30", "Project Alpha deadline moved to July 15"
    ]  # fmt: skip
    assert [c.change for c in fresh.changes(current.id)] == ["imported", "imported"]
    assert fresh.search(ALICE, "Project Alpha deadline", k=1)[0].content == "Project Alpha deadline moved to July 15"
    assert fresh.import_(text) == {"imported": 0, "skipped": 5}  # a second import adds nothing


def test_import_to_another_user_copies_history_and_stays_idempotent(store: MemoryStore):
    _alice(store)
    document = json.loads(store.export(ALICE))
    assert store.import_(document, user_id=BOB) == {"imported": 5, "skipped": 0}
    bob_now = {m.content for m in store.get_all(BOB)}
    assert "Project Alpha deadline moved to July 15" in bob_now and "Bob's deadline is unrelated" in bob_now
    assert {m.content for m in store.get_all(BOB, as_of="2026-06-01")} == {"Project Alpha deadline is June 30"}
    assert store.import_(document, user_id=BOB) == {"imported": 0, "skipped": 5}
    assert store.import_(document) == {"imported": 0, "skipped": 5}  # Alice's own rows are already there
    assert len(store.get_all(ALICE, include_inactive=True)) == 5


def test_import_of_a_hand_written_yaml_file(store: MemoryStore):
    text = """
schema_version: 1
memories:
  - schema_version: 1
    content: Alice prefers window seats
    scope: profile
    type: preference
    valid_from: 2026-03-01
  - {schema_version: 1, content: {city: Porto}, scope: episodic, type: context, tags: [travel]}
"""
    assert store.import_(text, user_id=ALICE) == {"imported": 2, "skipped": 0}
    seats = next(m for m in store.get_all(ALICE) if m.type == "preference")
    assert seats.valid_from == "2026-03-01T00:00:00+00:00"
    assert {m.content_format for m in store.get_all(ALICE)} == {"text", "json"}
    assert store.import_(text, user_id=ALICE) == {"imported": 0, "skipped": 2}


GOOD = {"schema_version": 1, "id": 1, "content": "ok", "scope": "profile", "type": "fact", "user_id": ALICE}


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([GOOD, {**GOOD, "id": 2, "scope": "forever"}], "record memories[1], field scope: 'forever' is not one of"),
        (
            [GOOD, {k: v for k, v in GOOD.items() if k != "content"} | {"id": 2}],
            "record memories[1], field content: is required",
        ),
        ([{**GOOD, "contnet": "typo"}], "record memories[0], field contnet: is not a known field"),
        (
            [GOOD, GOOD | {"id": 2}, GOOD | {"id": 3, "importance": 3}],
            "record memories[2], field importance: 3 is greater than the maximum of 1",
        ),
        ([GOOD | {"tags": "work"}], "record memories[0], field tags: 'work' is not of type 'array'"),
        ([GOOD | {"valid_from": "June 30"}], "record memories[0], field valid_from: 'June 30' does not match"),
        ([GOOD | {"valid_from": "2026-02-30"}], "record memories[0], field valid_from: '2026-02-30' is not a date"),
        ([GOOD | {"superseded_by": 7}], "record memories[0], field superseded_by: 7 is not the id of a record"),
        ([GOOD, GOOD], "record memories[1], field id: 1 is also the id of memories[0]"),
        ([GOOD | {"user_id": None}], "record memories[0], field user_id: scope profile needs a user"),
        ([GOOD | {"scope": "global"}], "record memories[0], field user_id: a global memory has no user"),
        (
            [GOOD | {"valid_from": "2026-05-01", "valid_to": "2026-04-01"}],
            "record memories[0], field valid_to: 2026-04-01T00:00:00+00:00 is before valid_from",
        ),
        ([GOOD | {"schema_version": 2}], "record memories[0], field schema_version: 1 was expected"),
    ],
)
def test_import_rejects_invalid_records_naming_index_and_field(store: MemoryStore, records: list, message: str):
    with pytest.raises(StoreError) as info:
        store.import_({"schema_version": 1, "memories": copy.deepcopy(records)})
    assert message in str(info.value)
    assert "nothing was imported" in str(info.value)
    assert store.get_all(ALICE, include_inactive=True) == []


def test_import_rejects_unreadable_text(store: MemoryStore):
    with pytest.raises(StoreError, match="not valid JSON or YAML"):
        store.import_("memories: [unclosed")
    with pytest.raises(StoreError, match="not valid JSON"):
        store.import_("{nope", format="json")
    with pytest.raises(StoreError, match="'just a sentence' is not of type 'object'"):
        store.import_("just a sentence")
    with pytest.raises(StoreError, match="field memories: is required"):
        store.import_({"schema_version": 1})
    with pytest.raises(StoreError, match="export format 'xml' is unknown"):
        store.export(ALICE, format="xml")
