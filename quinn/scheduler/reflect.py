"""Job 6, reflection (daily): repeated episodes become lasting knowledge, and memories feed the entity graph.

1. Promotion: when ``reflect_min_episodes`` or more similar episodic memories exist (cosine similarity at least
   ``reflect_similarity``) and one of them is new since the last run, one structured call states what they show.
   A semantic fact becomes a ``semantic`` memory with the model's confidence and the episodes' ids; the episodes
   stay as they are (they happened). Episodes once promoted are not promoted again, and a memory in the
   person's own words (``Memory.in_their_words``) is no episode to promote: the model's statement would stand in
   the profile, above their words, in its wording (job 3 explains why).
2. Core memories (identity, preference, relationship, behavioral) change slowly: reflection adds one when none
   is similar, and changes a similar one only when it is at least ``core_update_min_days`` old and the model is
   confident (0.7 or more).
3. Entities: memories new since the last run go through one structured call per user and batch; the entities
   and "{entity} {relation} {entity}" relations land in the graph tables, each tied to its memory, and the
   reply path uses them to pull memories linked to entities named in an email (``memory.graph``).

Resumable: the run's cursor (the highest memory id it covered) is stored with its counts; a run killed half way
stores none, so the next one covers the same memories again, and every write above is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, Field

from quinn.agent import opted_out_among
from quinn.errors import RetryLater
from quinn.memory import Memory, MemoryStore, Relation, current_with_vectors, find_similar, save_graph, similar_groups
from quinn.scheduler.context import JobContext

log = logging.getLogger(__name__)

CORE_TYPES = frozenset({"identity", "preference", "relationship", "behavioral"})
NOT_EPISODES = frozenset({"summary", "semantic", *CORE_TYPES})
CORE_MIN_CONFIDENCE = 0.7
SAME_STATEMENT = 0.85
GRAPH_BATCH = 40


class Reflection(BaseModel):
    """What a group of episodes shows about the person (``statement`` null: nothing lasting)."""

    statement: str | None = None
    type: Literal["semantic", "identity", "preference", "relationship", "behavioral"] = "semantic"
    confidence: float = Field(default=0.5, ge=0, le=1)


class GraphEntity(BaseModel):
    """A named entity."""

    name: str
    kind: str = ""


class GraphRelation(BaseModel):
    """``source`` ``relation`` ``target``, stated by memory ``memory_id``."""

    source: str
    relation: str
    target: str
    memory_id: int


class GraphExtraction(BaseModel):
    """The entity call's answer."""

    entities: list[GraphEntity] = Field(default_factory=list)
    relations: list[GraphRelation] = Field(default_factory=list)


def promoted_episode_ids(store: MemoryStore, user_id: str) -> set[int]:
    """Episodes any reflection of this user was drawn from (in any state: a forgotten one is not redone)."""
    rows = store.db.query(
        "SELECT j.value FROM memories m, json_each(json_extract(m.metadata, '$.reflection.episode_ids')) j"
        " WHERE m.user_id = ?",
        (user_id,),
    )
    return {int(r[0]) for r in rows}


def episode_groups(
    store: MemoryStore, user_id: str, min_episodes: int, similarity: float, after_id: int
) -> list[list[Memory]]:
    """Groups of similar episodes not promoted yet, with at least one episode newer than ``after_id``."""
    memories, vectors = current_with_vectors(store, user_id, scope="episodic", exclude_types=NOT_EPISODES)
    used = promoted_episode_ids(store, user_id)
    keep = [i for i, m in enumerate(memories) if m.id not in used and not m.in_their_words]
    if len(keep) < min_episodes:
        return []
    groups = similar_groups([memories[i] for i in keep], vectors[keep], similarity, min_episodes)
    return [g for g in groups if any(m.id > after_id for m in g)]


@dataclass(frozen=True)
class Promotion:
    """What applying one reflection did: created, updated, or skipped (and why)."""

    action: Literal["created", "updated", "skipped"]
    memory_id: int | None = None
    why: str = ""


def apply_reflection(
    store: MemoryStore, user_id: str, episodes: list[Memory], reflection: Reflection, now: datetime,
    core_min_days: float, version: str,
) -> Promotion:  # fmt: skip
    """Store one reflection as a new memory or a slow change to a core memory (see the module docstring)."""
    statement = " ".join((reflection.statement or "").split())
    if not statement or statement.upper() == "NONE":
        return Promotion("skipped", why="nothing lasting")
    provenance = {
        "reflection": {"episode_ids": [m.id for m in episodes], "template": version, "evidence": len(episodes)},
        "source_ids": [m.id for m in episodes], "confidence": reflection.confidence,
        # Drawn from what the person said only to Quinn, it is said only to them (withheld with others on a mail).
        **({"private": True} if any(m.private for m in episodes) else {}),
    }  # fmt: skip
    importance = max(m.importance for m in episodes)
    similar = [h.memory for h in find_similar(store, user_id, statement, SAME_STATEMENT)]
    if reflection.type in CORE_TYPES:
        core = [m for m in similar if m.type == reflection.type]
        if core:
            memory = core[0]
            age = now - datetime.fromisoformat(memory.valid_from)
            if memory.immutable:
                return Promotion("skipped", memory.id, "immutable")
            if age < timedelta(days=core_min_days):
                return Promotion("skipped", memory.id, f"changed {age.days} days ago; core memories change slowly")
            if reflection.confidence < CORE_MIN_CONFIDENCE:
                return Promotion("skipped", memory.id, f"confidence {reflection.confidence} too low for a core change")
            new_id = store.update(memory.id, statement, user_id=user_id, metadata=provenance, importance=max(
                importance, memory.importance), reason=f"reflection {version}")  # fmt: skip
            return Promotion("updated", new_id)
        new_id = store.add(user_id, statement, scope="profile", type=reflection.type, importance=importance,
                           metadata=provenance)  # fmt: skip
        return Promotion("created", new_id)
    if similar:
        return Promotion("skipped", similar[0].id, "already known")
    domains = {m.domain for m in episodes}
    # No bookkeeping tag: a shared tag would make unrelated reflections a consolidation group.
    new_id = store.add(user_id, statement, scope="domain", type="semantic", importance=importance,
                       domain=domains.pop() if len(domains) == 1 else None, metadata=provenance)  # fmt: skip
    return Promotion("created", new_id)


def graph_batches(store: MemoryStore, after_id: int, upto_id: int) -> list[tuple[str, list[Memory]]]:
    """Current memories with ``after_id < id <= upto_id``, per user, in batches of ``GRAPH_BATCH``."""
    rows = store.db.query(
        "SELECT DISTINCT user_id FROM memories WHERE user_id IS NOT NULL AND id > ? AND id <= ? ORDER BY user_id",
        (after_id, upto_id),
    )
    out: list[tuple[str, list[Memory]]] = []
    stopped = opted_out_among(store.db, [r[0] for r in rows])
    for (user_id,) in rows:
        if user_id in stopped:  # no graph grows about a person who asked not to be remembered
            continue
        fresh = sorted((m for m in store.get_all(user_id) if after_id < m.id <= upto_id), key=lambda m: m.id)
        out += [(user_id, fresh[i : i + GRAPH_BATCH]) for i in range(0, len(fresh), GRAPH_BATCH)]
    return out


def users_with_memories(store: MemoryStore) -> list[str]:
    """Users who have any memory and have not asked to stop being remembered (agent/consent.py): reflection
    writes new memories and graph entries about a person, so it leaves those who opted out alone."""
    users = [r[0] for r in store.db.query("SELECT DISTINCT user_id FROM memories WHERE user_id IS NOT NULL")]
    stopped = opted_out_among(store.db, users)
    return [u for u in users if u not in stopped]


def still_as_read(store: MemoryStore, memories: Sequence[Memory]) -> bool:
    """Whether every one of ``memories`` is still current with the same words: a forget (or an edit) while the
    model read them makes its answer out of date, and what it names may be what was just forgotten."""
    for memory in memories:
        now = store.get(memory.id)
        if now is None or not now.current or now.content != memory.content:
            return False
    return True


async def reflect_job(ctx: JobContext) -> None:
    """Promote repeated episodes, update core memories slowly, and extend the entity graph."""
    settings = ctx.settings
    upto = int(await ctx.db(ctx.store.db.query_value, "SELECT coalesce(max(id), 0) FROM memories") or 0)
    for user_id in sorted(await ctx.db(users_with_memories, ctx.store)):
        groups = await ctx.db(episode_groups, ctx.store, user_id, settings.reflect_min_episodes,
                              settings.reflect_similarity, ctx.cursor)  # fmt: skip
        for episodes in groups:
            rendered = ctx.prompts.render("reflect", {
                "user": {"address": user_id},
                "episodes": [{"id": m.id, "content": m.content, "date": m.valid_from[:10]} for m in episodes],
            })  # fmt: skip
            try:
                reflection, usage = await ctx.model().structured(rendered.system, rendered.user, Reflection)
            except RetryLater as exc:  # unpromoted episodes are asked again once new evidence arrives
                ctx.item_failed(f"episodes {[m.id for m in episodes]}", exc)
                continue
            ctx.item_done()
            await ctx.record_usage(usage, user_id)
            if not await ctx.db(still_as_read, ctx.store, episodes):  # asked again once new evidence arrives
                log.info("reflection for %s over %s: a memory changed meanwhile (a forget?); not stored", user_id,
                         [m.id for m in episodes])  # fmt: skip
                ctx.counts.skipped += 1
                continue
            outcome = await ctx.db(apply_reflection, ctx.store, user_id, episodes, reflection, ctx.now(),
                                   settings.core_update_min_days, rendered.version)  # fmt: skip
            ctx.counts.processed += len(episodes)
            if outcome.action == "created":
                ctx.counts.promoted += 1
                ctx.counts.created += 1
            elif outcome.action == "updated":
                ctx.counts.promoted += 1
                ctx.counts.updated += 1
            else:
                ctx.counts.skipped += 1
            log.info("reflection for %s over %s: %s %s %s", user_id, [m.id for m in episodes], outcome.action,
                     outcome.memory_id or "", outcome.why)  # fmt: skip
    entities = relations = 0
    graph_failed = False
    for user_id, memories in await ctx.db(graph_batches, ctx.store, ctx.cursor, upto):
        rendered = ctx.prompts.render("entities", {
            "user": {"address": user_id}, "memories": [{"id": m.id, "content": m.content} for m in memories],
        })  # fmt: skip
        try:
            graph, usage = await ctx.model().structured(rendered.system, rendered.user, GraphExtraction)
        except RetryLater as exc:
            ctx.item_failed(f"graph of memories {memories[0].id}-{memories[-1].id}", exc)
            graph_failed = True
            continue
        ctx.item_done()
        await ctx.record_usage(usage, user_id)
        if not await ctx.db(still_as_read, ctx.store, memories):  # the next run reads them again
            log.info("graph of %s's memories %d-%d: a memory changed meanwhile (a forget?); not stored", user_id,
                     memories[0].id, memories[-1].id)  # fmt: skip
            graph_failed = True
            continue
        change = await ctx.db(
            save_graph, ctx.store, user_id, [(e.name, e.kind) for e in graph.entities],
            [Relation(r.source, r.relation, r.target, r.memory_id) for r in graph.relations], ctx.now(),
        )  # fmt: skip
        entities += change.entities
        relations += change.relations
    ctx.counts.details.update(entities=entities, relations=relations)
    # A skipped graph batch keeps the cursor where it was, so the next run covers those memories again.
    ctx.counts.cursor = ctx.cursor if graph_failed else upto
