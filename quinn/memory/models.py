"""Plain data types of the memory layer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from quinn.clock import iso, utcnow

Scope = Literal["profile", "domain", "episodic", "global"]
SCOPES: tuple[str, ...] = ("profile", "domain", "episodic", "global")
MEMORY_TYPES: tuple[str, ...] = (
    "preference", "goal", "fact", "decision", "context", "feedback", "personal", "summary", "persona",
    "identity", "relationship", "behavioral", "semantic",
)  # fmt: skip
PRIVATE_TYPES: frozenset[str] = frozenset({"personal"})
SCHEMA_VERSION = 1
__all__ = ["MEMORY_COLUMNS", "Memory", "NewMemory", "SearchHit", "iso", "utcnow"]

MEMORY_COLUMNS = (
    "id, user_id, scope, domain, type, content, tags, metadata, importance, created_at, updated_at, version, "
    "root_id, valid_from, valid_to, superseded_by, expires_at, active, immutable, access_count, "
    "last_accessed_at, stability, embedding_model, schema_version"
)


@dataclass(frozen=True)
class Memory:
    """One version of one memory."""

    id: int
    user_id: str | None
    scope: str
    domain: str | None
    type: str
    content: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]
    importance: float
    created_at: str
    updated_at: str
    version: int
    root_id: int
    valid_from: str
    valid_to: str | None
    superseded_by: int | None
    expires_at: str | None
    active: bool
    immutable: bool
    access_count: int
    last_accessed_at: str | None
    stability: float
    embedding_model: str | None
    schema_version: int

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Memory:
        """Build from a row selected with ``MEMORY_COLUMNS``."""
        (mid, user_id, scope, domain, type_, content, tags, metadata, importance, created_at, updated_at,
         version, root_id, valid_from, valid_to, superseded_by, expires_at, active, immutable, access_count,
         last_accessed_at, stability, embedding_model, schema_version) = row  # fmt: skip
        return cls(
            id=int(mid), user_id=user_id, scope=scope, domain=domain, type=type_, content=content,
            tags=tuple(json.loads(tags or "[]")), metadata=json.loads(metadata or "{}"),
            importance=float(importance), created_at=created_at, updated_at=updated_at, version=int(version),
            root_id=int(root_id or mid), valid_from=valid_from, valid_to=valid_to, superseded_by=superseded_by,
            expires_at=expires_at, active=bool(active), immutable=bool(immutable),
            access_count=int(access_count), last_accessed_at=last_accessed_at, stability=float(stability),
            embedding_model=embedding_model, schema_version=int(schema_version),
        )  # fmt: skip

    @property
    def current(self) -> bool:
        """Active and not superseded (expiry is checked against a clock by the caller)."""
        return self.active and self.superseded_by is None and self.valid_to is None

    @property
    def private(self) -> bool:
        """Withheld when anyone other than the user is on the thread."""
        return self.type in PRIVATE_TYPES or bool(self.metadata.get("pii")) or bool(self.metadata.get("private"))

    def to_record(self) -> dict[str, Any]:
        """The JSON-ready export form (see memory.schema.json)."""
        return {
            "schema_version": self.schema_version, "id": self.id, "root_id": self.root_id,
            "user_id": self.user_id, "scope": self.scope, "domain": self.domain, "type": self.type,
            "content": self.content, "tags": list(self.tags), "metadata": self.metadata,
            "importance": self.importance, "created_at": self.created_at, "updated_at": self.updated_at,
            "version": self.version, "valid_from": self.valid_from, "valid_to": self.valid_to,
            "superseded_by": self.superseded_by, "expires_at": self.expires_at, "active": self.active,
            "immutable": self.immutable,
        }  # fmt: skip


@dataclass(frozen=True)
class NewMemory:
    """What ``MemoryStore.add_many`` takes: one memory to create."""

    user_id: str | None
    content: str
    scope: str = "profile"
    type: str = "fact"
    domain: str | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    importance: float = 0.5
    valid_from: datetime | str | None = None
    expires_at: datetime | str | None = None
    immutable: bool = False


@dataclass(frozen=True)
class SearchHit:
    """A retrieved memory with its fused score (higher is better) and the parts that made it."""

    memory: Memory
    score: float
    vector_similarity: float | None = None
    bm25_rank: int | None = None

    @property
    def id(self) -> int:
        """The memory's id."""
        return self.memory.id

    @property
    def content(self) -> str:
        """The memory's text."""
        return self.memory.content
