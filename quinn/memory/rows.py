"""Memory rows as column values: checking new memories, multi-row INSERT and UPDATE, and the audit log.

The store and the importer write through these helpers. Multi-row statements matter on a remote libSQL server,
where every ``execute`` costs two round trips (FACTS.md): a batch of memories is a few requests, not three per row.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from quinn.db import Transaction
from quinn.errors import StoreError
from quinn.memory.filters import normalise_user
from quinn.memory.models import SCHEMA_VERSION, SCOPES, NewMemory, content_text, iso
from quinn.memory.sensitive import detect

INSERT_CHUNK = 200  # rows per multi-row INSERT: 28 parameters each stays far below SQLite's 32,766 limit
_INSERT_COLUMNS = (
    "user_id, scope, domain, type, content, content_format, tags, metadata, importance, created_at, updated_at, "
    "version, root_id, valid_from, valid_to, superseded_by, expires_at, active, immutable, access_count, "
    "last_accessed_at, stability, embedding, embedding_model, schema_version, uid"
)
_INSERT_PLACEHOLDERS = "(" + ", ".join("?" * len(_INSERT_COLUMNS.split(", "))) + ")"


def insert_rows(tx: Transaction, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert full memory rows with multi-row INSERTs (few round trips to a remote server); returns their ids
    in input order. Rows without a uid get a fresh one."""
    columns = _INSERT_COLUMNS.split(", ")
    ids: list[int] = []
    for start in range(0, len(rows), INSERT_CHUNK):
        chunk = rows[start : start + INSERT_CHUNK]
        params: list[Any] = []
        for row in chunk:
            row.setdefault("uid", None)
            row["uid"] = row["uid"] or uuid.uuid4().hex
            params += [row.get(column, _DEFAULTS.get(column)) for column in columns]
        # RETURNING order is unspecified in SQLite: map the new ids back by uid.
        returned = dict(
            (uid, int(mid))
            for mid, uid in tx.query(
                f"INSERT INTO memories ({_INSERT_COLUMNS}) VALUES {', '.join([_INSERT_PLACEHOLDERS] * len(chunk))}"
                " RETURNING id, uid",
                params,
            )
        )
        ids += [returned[row["uid"]] for row in chunk]
    return ids


def update_rows(
    tx: Transaction, set_sql: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], leading: Sequence[Any] = ()
) -> None:
    """Update many memory rows with one ``UPDATE ... FROM (VALUES ...)`` per chunk: a remote server gets one
    request instead of one per row. ``set_sql`` names the new values ``v.<column>``; ``columns[0]`` is the id;
    ``leading`` are parameters of ``set_sql`` itself (they come first in the statement)."""
    select = ", ".join(f"column{i} AS {name}" for i, name in enumerate(columns, start=1))
    row_marks = "(" + ", ".join("?" * len(columns)) + ")"
    for start in range(0, len(rows), INSERT_CHUNK):
        chunk = rows[start : start + INSERT_CHUNK]
        tx.execute(
            f"UPDATE memories SET {set_sql} FROM (SELECT {select} FROM (VALUES {', '.join([row_marks] * len(chunk))}))"
            " AS v WHERE memories.id = v.id",
            [*leading, *(value for row in chunk for value in row)],
        )


def log_changes(tx: Transaction, memory_ids: Sequence[int], change: str, reason: str | None, now: str) -> None:
    """Append one audit entry per memory row, copied from the row in one statement."""
    if not memory_ids:
        return
    tx.execute(
        "INSERT INTO memory_versions (memory_id, root_id, user_id, version, change, content, metadata, reason,"
        f" changed_at) SELECT id, coalesce(root_id, id), user_id, version, ?, content, metadata, ?, ?"
        f" FROM memories WHERE id IN ({marks(memory_ids)}) ORDER BY id",
        [change, reason, now, *memory_ids],
    )


_DEFAULTS: dict[str, Any] = {
    "version": 1, "root_id": None, "valid_to": None, "superseded_by": None, "active": 1, "immutable": 0,
    "access_count": 0, "last_accessed_at": None, "stability": 24.0, "embedding": None, "embedding_model": None,
    "schema_version": SCHEMA_VERSION,
}  # fmt: skip


def marks(values: Sequence[Any]) -> str:
    """``?, ?, ?`` for an IN list of ``values``."""
    return ", ".join("?" * len(values))


def row_for(item: NewMemory, index: int) -> dict[str, Any]:
    """Check a new memory and turn it into column values; errors name the item and the field."""
    where = f"memory #{index}"
    try:
        content, content_format = content_text(item.content)
    except TypeError as exc:
        raise StoreError(f"{where}: {exc}") from None
    if not content.strip():
        raise StoreError(f"{where}: content must not be empty")
    if item.scope not in SCOPES:
        raise StoreError(f"{where}: scope {item.scope!r} is not one of {', '.join(SCOPES)}")
    if not isinstance(item.type, str) or not item.type or not item.type.replace("_", "").isalnum():
        raise StoreError(f"{where}: type {item.type!r} must be a word like fact or preference")
    if not isinstance(item.importance, int | float) or not 0.0 <= float(item.importance) <= 1.0:
        raise StoreError(f"{where}: importance {item.importance!r} must be a number between 0 and 1")
    if item.scope == "global" and item.user_id is not None:
        raise StoreError(f"{where}: global memories have no user", "pass user_id=None for scope global")
    if item.scope != "global" and not normalise_user(item.user_id):
        raise StoreError(f"{where}: scope {item.scope} needs a user", "pass the user's address as user_id")
    metadata = classified(content, item.metadata)
    tags = item.tags if not isinstance(item.tags, str) else (item.tags,)
    if not all(isinstance(tag, str) and tag.strip() for tag in tags):
        raise StoreError(f"{where}: tags must be non-empty strings, got {list(tags)!r}")
    return {
        "user_id": normalise_user(item.user_id), "scope": item.scope, "domain": item.domain, "type": item.type,
        "content": content, "content_format": content_format,
        "tags": json.dumps(sorted(set(tags)), ensure_ascii=False), "metadata": metadata_text(metadata, where),
        "importance": float(item.importance), "valid_from": moment(f"{where}: valid_from", item.valid_from),
        "expires_at": moment(f"{where}: expires_at", item.expires_at), "immutable": int(bool(item.immutable)),
    }  # fmt: skip


def classified(content: str, metadata: Any) -> Any:
    """``metadata`` with ``private`` set and the kinds listed under ``sensitive`` when ``content`` holds data that
    must never reach a shared thread (`quinn.memory.sensitive`). Never clears a flag: an update of a private
    memory stays private even when its new wording shows no such shape."""
    kinds = detect(content)
    if not kinds or not isinstance(metadata, dict):
        return metadata  # nothing found, or metadata that metadata_text refuses with its own message
    known = metadata.get("sensitive")
    merged = set(kinds) | (set(known) if isinstance(known, list) else set())
    return {**metadata, "private": True, "sensitive": sorted(merged)}


def metadata_text(metadata: Any, where: str) -> str:
    """Metadata as JSON text, refused unless it reads back equal (string keys, no tuples, no NaN)."""
    if not isinstance(metadata, dict):
        raise StoreError(f"{where}: metadata must be a JSON object (a dict), got {type(metadata).__name__}")
    try:
        text = json.dumps(metadata, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"{where}: metadata is not JSON: {exc}", "store only str, numbers, bools, lists, dicts"
        ) from None
    if json.loads(text) != metadata:
        # e.g. an int key or a tuple would come back changed: the caller would not get their metadata back.
        raise StoreError(f"{where}: metadata would not round-trip as JSON", "use string keys and lists, not tuples")
    return text


def moment(name: str, value: datetime | str | None) -> str | None:
    """``value`` as stored ISO 8601 UTC text; a ``StoreError`` naming ``name`` when it is not a date."""
    try:
        return iso(value)
    except (TypeError, ValueError):
        raise StoreError(f"{name} {value!r} is not a date", "use ISO 8601, e.g. 2026-07-01T09:00:00+00:00") from None
