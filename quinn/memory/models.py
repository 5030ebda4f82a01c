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
#: Types that are always private (withheld whenever anyone but the person is on the mail): ``summary``, a
#: thread's summary, may fold in what the person told Quinn alone (engine/conversation.py withholds the thread's
#: own summary from a shared mail for the same reason).
PRIVATE_TYPES: frozenset[str] = frozenset({"personal", "summary"})
SCHEMA_VERSION = 1
#: How a memory in the person's own words came to be (``metadata.via``): a statement of their mail kept as written
#: (``[memory] learn = "own_words"``) or "remember ..." by mail. No model rewrites these (consolidation, reflection).
THEIR_WORDS: frozenset[str] = frozenset({"own_words", "remember"})
"""Version of a memory row's meaning, stored in each row (``memories.schema_version``)."""
RECORD_SCHEMA_VERSION = 1
"""Version of the export record format (``memory.schema.json``); bump it when a record's fields change."""
__all__ = ["MEMORY_COLUMNS", "Change", "Content", "Memory", "NewMemory", "SearchHit", "iso", "utcnow"]

MEMORY_COLUMNS = (
    "id, user_id, scope, domain, type, content, tags, metadata, importance, created_at, updated_at, version, "
    "root_id, valid_from, valid_to, superseded_by, expires_at, active, immutable, access_count, "
    "last_accessed_at, stability, embedding_model, schema_version, uid, content_format"
)


def memory_columns(alias: str) -> str:
    """``MEMORY_COLUMNS`` qualified with a table alias (for joins, where ``content`` is ambiguous)."""
    return ", ".join(f"{alias}.{column}" for column in MEMORY_COLUMNS.split(", "))


Content = str | dict[str, Any] | list[Any]
"""What a memory holds: a sentence, or a JSON object or array (stored as its JSON text)."""


def content_text(content: Content) -> tuple[str, str]:
    """The stored form of ``content``: (text, content_format), where content_format is 'text' or 'json'."""
    if isinstance(content, str):
        return content, "text"
    if isinstance(content, dict | list):
        return json.dumps(content, ensure_ascii=False, sort_keys=True), "json"
    raise TypeError(f"content must be text, a JSON object or a JSON array, not {type(content).__name__}")


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
    uid: str = ""
    content_format: str = "text"

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Memory:
        """Build from a row selected with ``MEMORY_COLUMNS``."""
        (mid, user_id, scope, domain, type_, content, tags, metadata, importance, created_at, updated_at,
         version, root_id, valid_from, valid_to, superseded_by, expires_at, active, immutable, access_count,
         last_accessed_at, stability, embedding_model, schema_version, uid, content_format) = row  # fmt: skip
        return cls(
            id=int(mid), user_id=user_id, scope=scope, domain=domain, type=type_, content=content,
            tags=tuple(json.loads(tags or "[]")), metadata=json.loads(metadata or "{}"),
            importance=float(importance), created_at=created_at, updated_at=updated_at, version=int(version),
            root_id=int(root_id or mid), valid_from=valid_from, valid_to=valid_to, superseded_by=superseded_by,
            expires_at=expires_at, active=bool(active), immutable=bool(immutable),
            access_count=int(access_count), last_accessed_at=last_accessed_at, stability=float(stability),
            embedding_model=embedding_model, schema_version=int(schema_version), uid=uid or "",
            content_format=content_format or "text",
        )  # fmt: skip

    @property
    def value(self) -> Content:
        """The content as the caller stored it: the text, or the parsed JSON object or array."""
        return json.loads(self.content) if self.content_format == "json" else self.content

    @property
    def current(self) -> bool:
        """Active and not superseded (expiry is checked against a clock by the caller)."""
        return self.active and self.superseded_by is None and self.valid_to is None

    @property
    def in_their_words(self) -> bool:
        """The person's own sentence, kept as they wrote it (``THEIR_WORDS``), not a model's wording of it."""
        return self.metadata.get("via") in THEIR_WORDS

    @property
    def private(self) -> bool:
        """Withheld when anyone other than the user is on the thread."""
        return self.type in PRIVATE_TYPES or bool(self.metadata.get("pii")) or bool(self.metadata.get("private"))

    def to_record(self) -> dict[str, Any]:
        """The JSON-ready export form, one version of one memory (see memory.schema.json)."""
        return {
            "schema_version": RECORD_SCHEMA_VERSION, "uid": self.uid, "id": self.id, "root_id": self.root_id,
            "user_id": self.user_id, "scope": self.scope, "domain": self.domain, "type": self.type,
            "content": self.value, "tags": list(self.tags), "metadata": self.metadata,
            "importance": self.importance, "created_at": self.created_at, "updated_at": self.updated_at,
            "version": self.version, "valid_from": self.valid_from, "valid_to": self.valid_to,
            "superseded_by": self.superseded_by, "expires_at": self.expires_at, "active": self.active,
            "immutable": self.immutable, "access_count": self.access_count,
            "last_accessed_at": self.last_accessed_at, "stability": self.stability,
            "embedding_model": self.embedding_model,
        }  # fmt: skip


@dataclass(frozen=True)
class Change:
    """One entry of a memory's audit log: what happened to which version, when and why."""

    memory_id: int
    version: int
    change: str  # created | updated | superseded | forgotten | imported
    content: str
    reason: str | None
    changed_at: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"memory_id": self.memory_id, "version": self.version, "change": self.change,
                "content": self.content, "reason": self.reason, "changed_at": self.changed_at}  # fmt: skip


@dataclass(frozen=True)
class NewMemory:
    """What ``MemoryStore.add_many`` takes: one memory to create."""

    user_id: str | None
    content: Content
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
    """A retrieved memory with its fused score (higher is better) and the parts that made it.

    The memory's fields a caller usually needs are exposed on the hit itself (id, content, type, scope, domain,
    tags, metadata, valid_from, valid_to); ``score`` is comparable across one search, so callers can cut off.
    """

    memory: Memory
    score: float
    vector_similarity: float | None = None
    bm25_rank: int | None = None
    worded: bool = False  # a content word of the query is in it or in a neighbour of its conversation

    @property
    def id(self) -> int:
        """The memory's id."""
        return self.memory.id

    @property
    def content(self) -> str:
        """The memory's text (JSON text for JSON content)."""
        return self.memory.content

    @property
    def type(self) -> str:
        """The memory's type (fact, preference, ...)."""
        return self.memory.type

    @property
    def scope(self) -> str:
        """The memory's scope (profile, domain, episodic, global)."""
        return self.memory.scope

    @property
    def domain(self) -> str | None:
        """The memory's domain, if any."""
        return self.memory.domain

    @property
    def tags(self) -> tuple[str, ...]:
        """The memory's tags."""
        return self.memory.tags

    @property
    def metadata(self) -> dict[str, Any]:
        """The memory's metadata, as the caller stored it."""
        return self.memory.metadata

    @property
    def valid_from(self) -> str:
        """Since when the memory holds (ISO 8601 UTC)."""
        return self.memory.valid_from

    @property
    def valid_to(self) -> str | None:
        """Until when it held, for a superseded version."""
        return self.memory.valid_to

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the memory's record plus the scores."""
        return {**self.memory.to_record(), "score": self.score, "vector_similarity": self.vector_similarity,
                "bm25_rank": self.bm25_rank}  # fmt: skip
