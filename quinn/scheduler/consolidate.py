"""Job 3, consolidation: related memories of a user are merged into one.

A group is either at least ``consolidate_min_group`` current memories sharing a tag, or near-duplicates (cosine
similarity at least ``consolidate_similarity``, two or more). One model call per group writes the merged
sentence; the merged memory takes the highest importance, the union of tags and sources, and the ids it came
from; the originals are superseded by it (``superseded_by``) and stay in history. ``MemoryStore.supersede``
does the swap in one transaction, so a run killed at any point leaves every group either merged or untouched,
never half: no memory is both current and merged away. The next run finds the untouched groups again.

A memory kept in the person's own words (``Memory.in_their_words``: learnt with ``[memory] learn = "own_words"``
or by "remember ...") is never merged: the model would put its wording in place of theirs, which is what the
operator chose own words to avoid (the 1.5B's merges and promotions read "My father's last name is <address>").
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from quinn.agent import opted_out_among
from quinn.errors import RetryLater, StoreError
from quinn.memory import CURRENT, Memory, MemoryStore, NewMemory, current_with_vectors, similar_groups
from quinn.scheduler.context import JobContext

log = logging.getLogger(__name__)

SKIP_TYPES = frozenset({"summary", "persona"})  # thread summaries follow their session; personas are global
MAX_GROUP = 12  # a larger tag group is merged in steps of this size: one sentence cannot carry fifty memories
MAX_MERGED_CHARS = 2000


@dataclass(frozen=True)
class Group:
    """Memories to merge, and why they belong together."""

    user_id: str
    reason: str  # "tag:work" or "near-duplicates"
    memories: tuple[Memory, ...]


def find_groups(store: MemoryStore, user_id: str, min_group: int, similarity: float) -> list[Group]:
    """The user's merge groups: near-duplicates first, then tags shared by ``min_group`` memories or more."""
    candidates = [m for m in store.get_all(user_id) if _mergeable(m)]
    groups: list[Group] = []
    taken: set[int] = set()
    memories, vectors = current_with_vectors(store, user_id, exclude_types=SKIP_TYPES)
    keep = [i for i, m in enumerate(memories) if _mergeable(m)]
    for members in similar_groups([memories[i] for i in keep], vectors[keep], similarity, 2) if keep else []:
        groups.append(Group(user_id, "near-duplicates", tuple(members[:MAX_GROUP])))
        taken.update(m.id for m in members[:MAX_GROUP])
    by_tag: dict[str, list[Memory]] = {}
    for memory in sorted(candidates, key=lambda m: m.id):
        for tag in memory.tags:
            if not tag.startswith("session:"):
                by_tag.setdefault(tag, []).append(memory)
    for tag in sorted(by_tag, key=lambda t: (-len(by_tag[t]), t)):
        members = [m for m in by_tag[tag] if m.id not in taken][:MAX_GROUP]
        if len(members) < min_group:
            continue
        groups.append(Group(user_id, f"tag:{tag}", tuple(members)))
        taken.update(m.id for m in members)
    return groups


def _mergeable(memory: Memory) -> bool:
    """A memory the model may fold into one sentence: not one the person's own words keep (``in_their_words``)."""
    return (memory.current and not memory.immutable and not memory.in_their_words and memory.type not in SKIP_TYPES
            and memory.user_id is not None)  # fmt: skip


def merged_memory(group: Group, content: str, valid_from: str) -> NewMemory:
    """The memory that replaces a group: most common scope/type/domain, highest importance, unions of the rest."""
    members = group.memories
    most = max(members, key=lambda m: (m.importance, m.id))

    def common(values: Sequence[str | None]) -> str | None:
        present = [v for v in values if v]
        return Counter(present).most_common(1)[0][0] if present else None

    sources: list[dict] = []
    for memory in members:
        for source in (memory.metadata.get("source"), *memory.metadata.get("sources", ())):
            if source and source not in sources:
                sources.append(source)
    merged_from: list[int] = []
    for memory in members:
        merged_from += [*memory.metadata.get("consolidated_from", ()), memory.id]
    return NewMemory(
        user_id=group.user_id, content=content, scope=common([m.scope for m in members]) or most.scope,
        type=common([m.type for m in members]) or most.type, domain=common([m.domain for m in members]),
        tags=tuple(sorted({t for m in members for t in m.tags})), importance=max(m.importance for m in members),
        metadata={"consolidated_from": sorted(set(merged_from)), "merged_ids": [m.id for m in members],
                  "sources": sources, "consolidation": group.reason,
                  # What one member may say only to the person, the merge says only to them too.
                  **({"private": True} if any(m.private for m in members) else {})},
        valid_from=valid_from,
    )  # fmt: skip


def merge(store: MemoryStore, group: Group, content: str, valid_from: str, reason: str) -> int | None:
    """Supersede the group by the merged memory (one transaction); None when a member changed meanwhile."""
    try:
        return store.supersede([m.id for m in group.memories], merged_memory(group, content, valid_from),
                               reason=reason)  # fmt: skip
    except StoreError as exc:  # a member was updated, forgotten or merged since the group was found
        log.info("consolidation of %s skipped: %s", [m.id for m in group.memories], exc)
        return None


def users_with_memories(store: MemoryStore) -> list[str]:
    """Users who have current memories, but not those who asked to stop being remembered (agent/consent.py): a
    merge writes a new memory in the model's words, and their memory stays as they left it."""
    rows = store.db.query(
        f"SELECT DISTINCT user_id FROM memories WHERE user_id IS NOT NULL AND {CURRENT} ORDER BY user_id"
    )
    stopped = opted_out_among(store.db, [r[0] for r in rows])
    return [r[0] for r in rows if r[0] not in stopped]


async def consolidate_job(ctx: JobContext) -> None:
    """Merge every group of every user, one model call and one transaction per group."""
    settings = ctx.settings
    for user_id in await ctx.db(users_with_memories, ctx.store):
        groups = await ctx.db(find_groups, ctx.store, user_id, settings.consolidate_min_group,
                              settings.consolidate_similarity)  # fmt: skip
        for group in groups:
            rendered = ctx.prompts.render("consolidate", {
                "user": {"address": user_id},
                "memories": [{"id": m.id, "type": m.type, "content": m.content, "valid_from": m.valid_from[:10]}
                             for m in group.memories],
            })  # fmt: skip
            try:
                result = await ctx.model().text(rendered.system, rendered.user, background=True, purpose="consolidate")
            except RetryLater as exc:  # the group stays as it is until the next run
                ctx.item_failed(f"group {[m.id for m in group.memories]}", exc)
                continue
            ctx.item_done()
            await ctx.record_usage(result.usage, user_id)
            content = " ".join(result.text.split())
            if not content or content.upper() == "NONE" or len(content) > MAX_MERGED_CHARS:
                log.warning("consolidation of %s: unusable answer from the model, group left as is",
                            [m.id for m in group.memories])  # fmt: skip
                ctx.counts.skipped += 1
                continue
            new_id = await ctx.db(merge, ctx.store, group, content, ctx.now().isoformat(),
                                  f"consolidated ({group.reason}, {rendered.version})")  # fmt: skip
            if new_id is None:
                ctx.counts.skipped += 1
                continue
            ctx.counts.processed += len(group.memories)
            ctx.counts.merged += len(group.memories)
            ctx.counts.created += 1
            log.info("user %s: %d memories merged into %d (%s)", user_id, len(group.memories), new_id, group.reason)
