"""Export and import of a user's memories as JSON or YAML documents described by ``memory.schema.json``.

An export holds every row of the user (all versions, forgotten ones too), so an import restores the history as
well as what is current. Vectors are not exported: they belong to a model, and the importing store embeds the
content with its own. Import is all or nothing: every record is checked before anything is written, and the first
problem is reported with the record's index and field. Records carry a ``uid``; one already present is skipped,
so importing the same file twice adds nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import date, datetime
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import yaml

from quinn.errors import StoreError
from quinn.memory.filters import normalise_user
from quinn.memory.models import RECORD_SCHEMA_VERSION, content_text, iso, utcnow
from quinn.memory.parts import StoreParts
from quinn.memory.rows import INSERT_CHUNK, insert_rows, log_changes, metadata_text, update_rows

FORMATS = ("json", "yaml")
EMBED_BATCH = 64  # records embedded per call on import (and per progress report)
_UID_NAMESPACE = uuid.UUID("6f1c0f55-6a8e-4b8e-9a57-2f1d3c7a9e41")  # fixed: derived uids must not change
_NOTHING_WRITTEN = "fix the file and import it again; nothing was imported"


@cache
def record_schema() -> dict[str, Any]:
    """The JSON Schema of an export document (``quinn/memory/memory.schema.json``)."""
    text = resources.files("quinn.memory").joinpath("memory.schema.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def schema_problems(document: Any) -> list[str]:
    """Every way ``document`` breaks the schema, each naming the record and field, in file order."""
    validator = jsonschema.Draft202012Validator(record_schema())
    errors = sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    return [_describe(error) for error in errors]


def _describe(error: jsonschema.ValidationError) -> str:
    path = list(error.absolute_path)
    field = None
    if error.validator == "required":
        missing = [f for f in error.validator_value if isinstance(error.instance, dict) and f not in error.instance]
        field, message = (missing[0] if missing else None), "is required"
    elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        field = extra[0] if extra else None
        message = f"is not a known field (known: {', '.join(sorted(allowed))})"
    else:
        message = error.message
    if field is not None:
        path.append(field)
    if len(path) >= 2 and path[0] == "memories" and isinstance(path[1], int):
        where = f"record memories[{path[1]}]"
        rest = ".".join(str(p) for p in path[2:])
        return f"{where}, field {rest}: {message}" if rest else f"{where}: {message}"
    return f"field {'.'.join(str(p) for p in path)}: {message}" if path else message


# -- export ------------------------------------------------------------------------------------------------


def export_document(store: StoreParts, user_id: str) -> dict[str, Any]:
    """Every memory row of ``user_id`` as an export document, validated against the schema."""
    user = normalise_user(user_id)
    if not user:
        raise StoreError("export needs a user id", "name the user's address")
    memories = store.get_all(user, include_inactive=True)
    memories.sort(key=lambda m: m.id)
    document = {
        "schema_version": RECORD_SCHEMA_VERSION,
        "exported_at": iso(utcnow()),
        "user_id": user,
        "memories": [m.to_record() for m in memories],
    }
    problems = schema_problems(document)
    if problems:  # the store wrote something its own schema refuses: a bug, and the file would not import
        raise StoreError(f"export of {user} does not match memory.schema.json: {problems[0]}")
    return document


def dump_document(document: dict[str, Any], format: str = "json") -> str:
    """The document as JSON (indented) or YAML text."""
    if format == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if format == "yaml":
        return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120))
    raise StoreError(f"export format {format!r} is unknown", "use json or yaml")


# -- import ------------------------------------------------------------------------------------------------


def load_document(data: str | bytes, format: str | None = None) -> Any:
    """Parse JSON or YAML text (``format`` None: JSON if it parses, else YAML); dates become ISO strings."""
    if format not in (None, *FORMATS):
        raise StoreError(f"import format {format!r} is unknown", "use json or yaml")
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    if format in (None, "json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            if format == "json":
                raise StoreError(f"import: not valid JSON: {exc}", _NOTHING_WRITTEN) from None
    try:
        # YAML turns an unquoted 2026-06-30 into a date object; the schema speaks of ISO 8601 text.
        return _dates_as_text(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise StoreError(f"import: not valid JSON or YAML: {' '.join(str(exc).split())}", _NOTHING_WRITTEN) from None


def _dates_as_text(node: Any) -> Any:
    if isinstance(node, datetime | date):
        return node.isoformat()
    if isinstance(node, dict):
        return {key: _dates_as_text(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_dates_as_text(value) for value in node]
    return node


def import_document(
    store: StoreParts, document: Any, *, user_id: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int]:  # fmt: skip
    """Write the records of a parsed document (or a bare list of records); see ``MemoryStore.import_``."""
    if isinstance(document, list):
        document = {"schema_version": RECORD_SCHEMA_VERSION, "memories": document}
    problems = schema_problems(document)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreError(f"import: {problems[0]}{more}", _NOTHING_WRITTEN)
    records: list[dict[str, Any]] = document["memories"]
    target = normalise_user(user_id) if user_id else None
    now = iso(utcnow())
    assert now is not None
    rows = [_row(record, index, target, now) for index, record in enumerate(records)]
    file_ids = _check_links(records)
    first_with: dict[str, int] = {}
    for index, row in enumerate(rows):
        if first_with.setdefault(row["uid"], index) != index:
            raise StoreError(f"import: record memories[{index}], field uid: the same memory as "
                             f"memories[{first_with[row['uid']]}]", _NOTHING_WRITTEN)  # fmt: skip

    existing: dict[str, int] = {}
    uids = list(first_with)
    for start in range(0, len(uids), INSERT_CHUNK):
        chunk = uids[start : start + INSERT_CHUNK]
        found = store.db.query(f"SELECT uid, id FROM memories WHERE uid IN ({', '.join('?' * len(chunk))})", chunk)
        existing.update((uid, int(mid)) for uid, mid in found)
    fresh = [row for row in rows if row["uid"] not in existing]
    for start in range(0, len(fresh), EMBED_BATCH):
        batch = fresh[start : start + EMBED_BATCH]
        vectors = store.vectors([row["content"] for row in batch])
        for row, vector in zip(batch, vectors if vectors is not None else [None] * len(batch), strict=True):
            row["embedding"] = vector.tobytes() if vector is not None else None
            row["embedding_model"] = store.embedder.model_id if (vector is not None and store.embedder) else None
        if progress is not None:
            progress(start + len(batch), len(fresh))
    with store.db.transaction() as tx:
        new_ids = insert_rows(tx, [{k: v for k, v in row.items() if not k.startswith("_")} for row in fresh])
        db_id = dict(existing)
        db_id.update(zip([row["uid"] for row in fresh], new_ids, strict=True))
        by_file_id = {file_id: db_id[rows[index]["uid"]] for file_id, index in file_ids.items()}
        links = []
        for row in fresh:
            own = db_id[row["uid"]]
            root = by_file_id[row["_root"]] if row["_root"] is not None else own
            successor = by_file_id[row["_superseded_by"]] if row["_superseded_by"] is not None else None
            links.append((own, root, successor))
        update_rows(tx, "root_id = v.root, superseded_by = v.successor", ("id", "root", "successor"), links)
        for start in range(0, len(new_ids), INSERT_CHUNK):
            log_changes(tx, new_ids[start : start + INSERT_CHUNK], "imported", "import", now)
    return {"imported": len(fresh), "skipped": len(rows) - len(fresh)}


def _row(record: dict[str, Any], index: int, target: str | None, now: str) -> dict[str, Any]:
    """Column values for one valid record; semantic problems (times, users, spans) name the record and field."""
    where = f"record memories[{index}]"

    def moment(field: str, default: str | None = None) -> str | None:
        value = record.get(field)
        if value is None:
            return default
        try:
            return iso(value)
        except ValueError:
            raise StoreError(f"import: {where}, field {field}: {value!r} is not a date", _NOTHING_WRITTEN) from None

    source_user = normalise_user(record.get("user_id"))
    user = source_user if target is None or record["scope"] == "global" else target
    if record["scope"] == "global" and user is not None:
        raise StoreError(f"import: {where}, field user_id: a global memory has no user", _NOTHING_WRITTEN)
    if record["scope"] != "global" and user is None:
        raise StoreError(f"import: {where}, field user_id: scope {record['scope']} needs a user",
                         "give the record a user_id, or import with a target user; nothing was imported")  # fmt: skip
    content, content_format = content_text(record["content"])
    created_at = moment("created_at", now)
    valid_from = moment("valid_from", created_at)
    valid_to = moment("valid_to")
    if valid_to is not None and valid_from is not None and valid_to < valid_from:
        raise StoreError(f"import: {where}, field valid_to: {valid_to} is before valid_from {valid_from}",
                         _NOTHING_WRITTEN)  # fmt: skip
    uid = record.get("uid")
    if uid is None:
        # A hand-written record: derive the uid from what it says, so a second import still adds nothing.
        said = [user, record["scope"], record["type"], content, moment("valid_from"), record.get("version", 1)]
        key = json.dumps(said)
        uid = uuid.uuid5(_UID_NAMESPACE, key).hex
    elif user != source_user:
        uid = uuid.uuid5(_UID_NAMESPACE, f"{uid}:{user}").hex  # a copy for another user is another row
    return {
        "uid": uid, "user_id": user, "scope": record["scope"], "domain": record.get("domain"),
        "type": record["type"], "content": content, "content_format": content_format,
        "tags": json.dumps(sorted(set(record.get("tags", []))), ensure_ascii=False),
        "metadata": metadata_text(record.get("metadata", {}), f"import: {where}"),
        "importance": float(record.get("importance", 0.5)), "created_at": created_at,
        "updated_at": moment("updated_at", created_at), "version": int(record.get("version", 1)),
        "valid_from": valid_from, "valid_to": valid_to, "expires_at": moment("expires_at"),
        "active": int(record.get("active", True)), "immutable": int(record.get("immutable", False)),
        "access_count": int(record.get("access_count", 0)), "last_accessed_at": moment("last_accessed_at"),
        "stability": float(record.get("stability", 24.0)),
        "_root": record.get("root_id"), "_superseded_by": record.get("superseded_by"),
    }  # fmt: skip


def _check_links(records: list[dict[str, Any]]) -> dict[int, int]:
    """File ids → record index; root_id and superseded_by must name an id of this file."""
    file_ids: dict[int, int] = {}
    for index, record in enumerate(records):
        if "id" in record:
            if record["id"] in file_ids:
                raise StoreError(f"import: record memories[{index}], field id: {record['id']} is also the id of "
                                 f"memories[{file_ids[record['id']]}]", _NOTHING_WRITTEN)  # fmt: skip
            file_ids[int(record["id"])] = index
    for index, record in enumerate(records):
        for field in ("root_id", "superseded_by"):
            value = record.get(field)
            if value is not None and int(value) not in file_ids:
                raise StoreError(f"import: record memories[{index}], field {field}: {value} is not the id of a "
                                 "record in this file", _NOTHING_WRITTEN)  # fmt: skip
    return file_ids
