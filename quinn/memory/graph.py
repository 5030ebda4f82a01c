"""The entity graph: "{entity} {relation} {entity}" facts per user, each tied to the memory it came from.

Reflection fills it (``save_graph``); the reply path asks it for memories linked to entities named in an email
(``linked_hits``), which plain similarity search can miss ("Bob" in a mail, "Alice's manager is Bob" in memory
says nothing about the project Bob runs). An entity is named in a mail by its name, or by the role a relation
gives it: "my sister" names Ana when the graph holds "Alice has sister Ana" (or "Ana sister of Alice").
Everything is per user: a lookup never crosses users.

Names and relations are not embedded: measured with the default model, a mail's sentence ("how is my sister
doing?") scored 0.27 against "Alice has sister Ana" and 0.32 against "Alice works at Acme", so similarity could
not tell the relation a mail means; the role words do, exactly. The ``embedding`` columns stay empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from quinn.clock import iso
from quinn.memory.filters import normalise_user
from quinn.memory.models import MEMORY_COLUMNS, Memory, SearchHit
from quinn.memory.store import MemoryStore, memory_filter

HUB_RELATIONS = 25  # an entity in more relations than this (usually the user) links to everything: skip it


def clean_name(name: str) -> str:
    """An entity name with whitespace collapsed and surrounding punctuation removed."""
    return " ".join(name.split()).strip(" .,;:'\"()[]")


@dataclass(frozen=True)
class Relation:
    """One edge: ``source`` ``relation`` ``target``, learned from memory ``memory_id``."""

    source: str
    relation: str
    target: str
    memory_id: int


@dataclass(frozen=True)
class GraphChange:
    """How many entities and relations one ``save_graph`` call added."""

    entities: int
    relations: int


def save_graph(
    store: MemoryStore, user_id: str, entities: Sequence[tuple[str, str]], relations: Sequence[Relation],
    now: datetime,
) -> GraphChange:  # fmt: skip
    """Add entities (name, kind) and relations for ``user_id``; both are idempotent (found by name, case-blind).

    Relations whose memory is not one of this user's are refused: the model names ids, and an id of someone
    else's memory must never link into this user's graph.
    """
    own = _own_memory_ids(store, user_id, {r.memory_id for r in relations})
    relations = [r for r in relations if r.memory_id in own and clean_name(r.source) and clean_name(r.target)]
    kinds = {clean_name(n).lower(): (clean_name(n), k) for n, k in entities if clean_name(n)}
    for r in relations:
        for name in (clean_name(r.source), clean_name(r.target)):
            kinds.setdefault(name.lower(), (name, ""))
    added_entities = added_relations = 0
    with store.db.transaction() as tx:
        ids: dict[str, int] = {}
        for key, (display, kind) in kinds.items():
            found = tx.query("SELECT id FROM entities WHERE user_id = ? AND lower(name) = ?", (user_id, key))
            if found:
                ids[key] = int(found[0][0])
                continue
            ids[key] = tx.execute("INSERT INTO entities (user_id, name, kind, created_at) VALUES (?, ?, ?, ?)",
                                  (user_id, display, kind, iso(now)))  # fmt: skip
            added_entities += 1
        for r in relations:
            source, target = ids[clean_name(r.source).lower()], ids[clean_name(r.target).lower()]
            relation = " ".join(r.relation.split()).lower()
            exists = tx.query(
                "SELECT 1 FROM relationships WHERE user_id = ? AND source_id = ? AND relation = ? AND target_id = ?"
                " AND memory_id = ?",
                (user_id, source, relation, target, r.memory_id),
            )
            if exists:
                continue
            tx.execute(
                "INSERT INTO relationships (user_id, source_id, relation, target_id, memory_id, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (user_id, source, relation, target, r.memory_id, iso(now)),
            )
            added_relations += 1
    return GraphChange(added_entities, added_relations)


def _own_memory_ids(store: MemoryStore, user_id: str, ids: set[int]) -> set[int]:
    if not ids:
        return set()
    rows = store.db.query(
        f"SELECT id FROM memories WHERE user_id = ? AND id IN ({','.join('?' * len(ids))})", [user_id, *ids]
    )
    return {int(r[0]) for r in rows}


_MY = re.compile(r"\bmy\s+([a-z][a-z-]+)", re.IGNORECASE)


def named_entities(store: MemoryStore, user_id: str, text: str) -> list[tuple[int, str]]:
    """The user's entities named in ``text``: by name as a whole word (case-blind), or by role ("my sister" is
    the target of "… has sister …" and the source of "… sister of …"): (id, name)."""
    rows = store.db.query("SELECT id, name FROM entities WHERE user_id = ?", (user_id,))
    names = {int(entity_id): name for entity_id, name in rows}
    found = {entity_id: name for entity_id, name in names.items()
             if len(name) >= 2 and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE)}  # fmt: skip
    roles = {word.lower() for word in _MY.findall(text)}
    if roles:
        edges = store.db.query("SELECT source_id, relation, target_id FROM relationships WHERE user_id = ?",
                               (user_id,))  # fmt: skip
        for source_id, relation, target_id in edges:
            words = relation.lower().replace("_", " ").split()
            for at, word in enumerate(words):
                if word in roles:  # "sister of" describes the source; "has sister", "sister" the target
                    entity_id = int(source_id if words[at + 1 : at + 2] == ["of"] else target_id)
                    if entity_id in names:
                        found.setdefault(entity_id, names[entity_id])
    return sorted(found.items())


def linked_memories(store: MemoryStore, user_id: str, text: str, *, limit: int = 5) -> list[Memory]:
    """Current memories of the user linked in the graph to an entity named in ``text``, most specific first.

    An entity in very many relations (the user themselves, usually) is skipped: it would link to everything.
    A relation learned from a memory that was since updated or merged points to the memory holding it now.
    """
    named = named_entities(store, user_id, text)
    if not named:
        return []
    ids = [entity_id for entity_id, _name in named]
    marks = ",".join("?" * len(ids))
    rows = store.db.query(
        "SELECT r.memory_id, min(degree) FROM relationships r JOIN ("
        "  SELECT e.id AS entity_id, (SELECT count(*) FROM relationships x WHERE x.user_id = e.user_id"
        "   AND (x.source_id = e.id OR x.target_id = e.id)) AS degree"
        f"  FROM entities e WHERE e.user_id = ? AND e.id IN ({marks})"
        ") d ON r.source_id = d.entity_id OR r.target_id = d.entity_id"
        f" WHERE r.user_id = ? AND degree <= {HUB_RELATIONS} GROUP BY r.memory_id ORDER BY min(degree), r.memory_id",
        [user_id, *ids, user_id],
    )
    memories: list[Memory] = []
    seen: set[int] = set()
    for memory_id, _degree in rows:
        memory = _current_version(store, user_id, int(memory_id))
        if memory is None or memory.id in seen:
            continue  # forgotten or archived, or reached already through another relation
        seen.add(memory.id)
        memories.append(memory)
        if len(memories) >= limit:
            break
    return memories


def _current_version(store: MemoryStore, user_id: str, memory_id: int, max_hops: int = 50) -> Memory | None:
    """Follow ``superseded_by`` (updates and merges) to the memory that holds this one's content now."""
    where, params = memory_filter(user_id)
    for _ in range(max_hops):
        row = store.db.query_one(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ? AND user_id = ?",
                                 (memory_id, user_id))  # fmt: skip
        if row is None:
            return None
        memory = Memory.from_row(row)
        if memory.superseded_by is None:
            current = store.db.query_one(f"SELECT m.id FROM memories m WHERE {where} AND m.id = ?",
                                         [*params, memory.id])  # fmt: skip
            return memory if current is not None else None
        memory_id = int(memory.superseded_by)
    return None


def linked_hits(
    store: MemoryStore, user_id: str, text: str, hits: Sequence[SearchHit], *, limit: int = 5
) -> list[SearchHit]:
    """``hits`` followed by graph-linked memories they do not already hold (scored just below the last hit)."""
    have = {h.memory.id for h in hits}
    floor = min((h.score for h in hits), default=1.0) * 0.9
    extra = [SearchHit(m, floor) for m in linked_memories(store, user_id, text, limit=limit) if m.id not in have]
    return [*hits, *extra]


def forget_in_graph(
    store: MemoryStore, user_id: str, mentions: Callable[[str], bool], memory_ids: Sequence[int]
) -> int:
    """A forget's part of the graph (issue 35): the relations learnt from the forgotten memories (any version
    of them, ``memory_ids``) end, and so do the relations ``mentions`` finds in "source relation target" and
    the entities it names, with every relation they are in. Returns the relations and entities deleted."""
    user = normalise_user(user_id)
    named = [int(i) for i, name in store.db.query("SELECT id, name FROM entities WHERE user_id = ?", (user,))
             if mentions(str(name))]  # fmt: skip
    stated = store.db.query(
        "SELECT r.id, s.name || ' ' || r.relation || ' ' || t.name FROM relationships r"
        " JOIN entities s ON s.id = r.source_id JOIN entities t ON t.id = r.target_id WHERE r.user_id = ?",
        (user,),
    )
    with store.db.transaction() as tx:
        gone = 0
        for relation_id, text in stated:
            if mentions(str(text)):
                gone += tx.delete("relationships", "id = ?", (relation_id,))
        for memory_id in memory_ids:
            gone += tx.delete("relationships", "user_id = ? AND memory_id = ?", (user, memory_id))
        for entity in named:
            gone += tx.delete("relationships", "user_id = ? AND (source_id = ? OR target_id = ?)",
                              (user, entity, entity))  # fmt: skip
            gone += tx.delete("entities", "user_id = ? AND id = ?", (user, entity))
    return gone


def graph_of(store: MemoryStore, user_id: str) -> dict[str, list[dict[str, object]]]:
    """The user's entities and relations, as the export and the person page show them (issue 35)."""
    user = normalise_user(user_id)
    entities = store.db.query("SELECT name, kind FROM entities WHERE user_id = ? ORDER BY name", (user,))
    relations = store.db.query(
        "SELECT s.name, r.relation, t.name, r.memory_id FROM relationships r JOIN entities s ON s.id = r.source_id"
        " JOIN entities t ON t.id = r.target_id WHERE r.user_id = ? ORDER BY r.id",
        (user,),
    )
    return {
        "entities": [{"name": n, "kind": k} for n, k in entities],
        "relations": [{"source": s, "relation": r, "target": t, "memory_id": m} for s, r, t, m in relations],
    }
