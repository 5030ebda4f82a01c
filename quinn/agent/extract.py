"""Memory extraction: after a reply, one structured call finds what is worth remembering; we store it.

``apply_extraction`` stores what any extraction found, this one or the session review's
(scheduler/session_close.py): it is the one function that applies extracted memories, and its docstring
states the near-duplicate rule (cosine >= ``DUPLICATE_SIMILARITY``: restated as a new version from a mail,
skipped from a review). Updates and contradictions write a new version valid from the email's Date, and the
old version is closed at that moment (``valid_to``), so it never reaches a prompt again but stays in history.
A new memory about the same attribute as a current one (its ``about`` key, ``updates.py``) is such an update
too, whatever list the model put it in (``keyed_updates``).
Only the mail's own text is used: quoted replies (other people's words) and the signature were stripped by
the parser, and a mail with no text of its own teaches nothing. The caller only extracts from authenticated
mail of the user (policy) and after the sensory gate (``gate.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel, Field

from quinn.agent import updates
from quinn.agent.context import email_variables
from quinn.agent.domains import DomainDetector
from quinn.agent.facts import facts
from quinn.agent.grounding import Grounding, grounded
from quinn.agent.llm import LLM, PromptTooLong, Usage
from quinn.agent.prompts import PromptStore
from quinn.agent.tools import scope_for
from quinn.clock import iso
from quinn.errors import StoreError
from quinn.mailbox import InboundEmail
from quinn.memory import Memory, MemoryStore, NewMemory, asked_to_keep, find_similar, mask

log = logging.getLogger(__name__)

MemoryType = Literal["preference", "goal", "fact", "decision", "context", "feedback", "personal"]
DUPLICATE_SIMILARITY = 0.85
KEYED_ROWS = 500  # current memories compared by their ``about`` key (newest first) when new ones are stored
NEAREST = 3  # a replaced memory is among the new text's 3 nearest current memories (and in the nearer half)
EXISTING_SHOWN = 200  # the person's current memories shown to the extraction at most (newest first)
EXTRACT_TRIES = 3  # an extraction too long for the model's context is asked again with fewer memories shown


class ExtractedMemory(BaseModel):
    """One thing worth remembering, as the model states it."""

    content: str = Field(description="One self-contained sentence in the third person naming the person.")
    type: MemoryType
    importance: float = Field(default=0.5, ge=0, le=1)
    confidence: Literal["high", "medium", "low"] = "medium"
    domain: str | None = None
    tags: list[str] = Field(default_factory=list)
    about: str | None = Field(
        default=None,
        description="The attribute it states, in a few words ('home city', 'employer', 'diet'): the same words "
        "as an existing memory about the same thing, so a new value replaces the old.",
    )
    private: bool = Field(
        default=False,
        description="true for health, money and account details, passwords or codes, identity numbers, religion, "
        "politics, sex life, or anything shared in confidence: never shown when others are on the thread",
    )
    valid_until: str | None = Field(
        default=None,
        description="For a time-bound fact ('this week', 'until Friday', 'during the conference'): the last day it "
        "holds, as YYYY-MM-DD; null when it has no end.",
    )


class ChangedMemory(ExtractedMemory):
    """A new version of an existing memory (by its id)."""

    id: int


class Extraction(BaseModel):
    """The extraction call's answer."""

    new: list[ExtractedMemory] = Field(default_factory=list)
    updated: list[ChangedMemory] = Field(default_factory=list)
    contradicted: list[ChangedMemory] = Field(default_factory=list)
    completed: list[int] = Field(default_factory=list, description="ids of existing goals the email reports done")


@dataclass(frozen=True)
class ExtractionOutcome:
    """What extraction did: ids created and updated, and the call's cost."""

    created: list[int]
    updated: list[int]
    usage: Usage | None


def extract_variables(
    user_id: str, email: InboundEmail, existing: Sequence[Memory], domains: Sequence[dict[str, str]]
) -> dict[str, Any]:
    """The extract template's variables; ``email.text`` is the mail's own text only, never the quoted part."""
    variables = email_variables(email)
    variables["text"] = email.text
    return {
        "user": {"address": user_id},
        "email": variables,
        "existing": [existing_variables(m) for m in existing],
        "domains": list(domains),
    }


def existing_variables(memory: Memory) -> dict[str, Any]:
    """One existing memory as the extract template sees it, with its ``about`` key ("" when it has none)."""
    return {"id": memory.id, "type": memory.type, "content": memory.content, "domain": memory.domain,
            "about": memory.metadata.get("about") or ""}  # fmt: skip


async def extract_memories(
    llm: LLM, prompts: PromptStore, store: MemoryStore, user_id: str, email: InboundEmail, run_db,
    domains: DomainDetector | None = None,
) -> ExtractionOutcome:  # fmt: skip
    """Ask the background model what ``email`` teaches about ``user_id`` and store it. ``run_db`` runs DB work."""
    if not email.text.strip():
        log.info("extraction for %s: nothing of their own in %s", user_id, email.message_id)
        return ExtractionOutcome([], [], None)
    existing = await run_db(store.get_all, user_id, limit=EXISTING_SHOWN)
    known = [{"name": d.name, "description": d.description} for d in (domains.domains if domains else [])]
    # A person with years of mail has more memories than a small model's context holds with the mail (issue 32,
    # the 1.5B pilot: of 4,096 tokens the instructions and schema take ~1,900, the answer 400 and a thread's
    # mails up to 1,500, leaving room for 10 to 50 memories of ~30 tokens): asked again with the newest that
    # fit, as the session review is, not left unlearnt. Same-attribute updates do not depend on what is shown
    # (``keyed_updates`` compares in code).
    shown = len(existing)
    for attempt in range(1, EXTRACT_TRIES + 1):
        rendered = prompts.render("extract", extract_variables(user_id, email, existing[:shown], known))
        try:
            extraction, usage = await llm.structured(rendered.system, rendered.user, Extraction)
            break
        except PromptTooLong as exc:
            if attempt == EXTRACT_TRIES or not shown:
                raise
            shown = int(shown * exc.keep_share())
            log.info("extraction for %s: the prompt is too long for the model (%s tokens of %s); asking again with "
                     "the newest %d of %d known memories", email.message_id, exc.requested or "?", exc.limit or "?",
                     shown, len(existing))  # fmt: skip
    if domains is not None:
        for item in (*extraction.new, *extraction.updated, *extraction.contradicted):
            item.domain = domains.normalise(item.domain)
    else:
        for item in (*extraction.new, *extraction.updated, *extraction.contradicted):
            item.domain = None
    source = {
        "source": {
            "message_id": email.message_id, "subject": email.subject,
            "date": email.date.isoformat() if email.date else None,
        },
    }  # fmt: skip
    # Their words: this mail's own text. Not the known memories the model was shown: what a memory adds must be
    # in this mail (a value from another memory, restated in answer to "Which locker is mine?", is no news, and
    # an invented one must not pass for it); an update may stand on the wording it replaces.
    grounding = Grounding.of([email.text], [user_id, email.from_.name if email.from_ else ""])
    applied = await run_db(apply_extraction, store, user_id, extraction, source=source, valid_from=email.date,
                           reason=f"by {email.message_id} ({rendered.version})", sent=email.date,
                           grounding=grounding, keep_secrets=asked_to_keep(email.text))  # fmt: skip
    log.info("extraction for %s: %d new, %d updated, %d not in their words (%s)", user_id, len(applied.created),
             len(applied.updated), applied.ungrounded, rendered.version)  # fmt: skip
    return ExtractionOutcome(applied.created, applied.updated, usage)


def expiry(memory: ExtractedMemory, sent: datetime | None) -> str | None:
    """When a time-bound memory stops being current: the end (UTC) of its ``valid_until`` day. A date that cannot
    be read, or one before the mail was written, is ignored (the memory is kept open-ended, never lost)."""
    if not memory.valid_until:
        return None
    try:
        day = date.fromisoformat(memory.valid_until.strip()[:10])
    except ValueError:
        log.info("extraction: unreadable valid_until %r ignored", memory.valid_until)
        return None
    end = datetime.combine(day, time(23, 59, 59), tzinfo=UTC)
    if sent is not None and end < sent:
        return None
    return iso(end)


def distinct(store: MemoryStore, memories: list[ExtractedMemory]) -> list[ExtractedMemory]:
    """The batch without its own near-duplicates (cosine >= ``DUPLICATE_SIMILARITY``, the threshold used against
    stored memories): a model that states one fact twice in one answer stores it once. The first wins."""
    if len(memories) < 2:
        return list(memories)
    if store.embedder is None:  # full-text only: exact text (case and spaces folded) is all that can be compared
        seen: set[str] = set()
        kept = []
        for memory in memories:
            key = " ".join(memory.content.lower().split())
            if key not in seen:
                seen.add(key)
                kept.append(memory)
        return kept
    vectors = store.embedder.embed([m.content for m in memories])
    kept_at: list[int] = []
    for i in range(len(memories)):
        if all(float(vectors[i] @ vectors[j]) < DUPLICATE_SIMILARITY for j in kept_at):
            kept_at.append(i)
    return [memories[i] for i in kept_at]


@dataclass(frozen=True)
class Applied:
    """What applying an extraction did: ids created and updated, and new memories skipped as already known."""

    created: list[int]
    updated: list[int]
    skipped: int = 0
    ungrounded: int = 0  # memories and changes dropped: nothing of them stands on the person's words


def metadata_for(memory: ExtractedMemory, source: dict[str, Any]) -> dict[str, Any]:
    """A memory's metadata: where it was learnt, how sure the model was, and private when the model said so (the
    store adds ``private`` on its own for data of a sensitive shape, `quinn.memory.sensitive`)."""
    about = updates.clean_about(memory.about)
    return {**source, "confidence": memory.confidence, **({"private": True} if memory.private else {}),
            **({"about": about} if about else {})}  # fmt: skip


def apply_extraction(
    store: MemoryStore, user_id: str, extraction: Extraction, *, source: dict[str, Any], valid_from: datetime | str,
    reason: str, sent: datetime | None = None, restate: bool = True, grounding: Grounding | None = None,
    keep_secrets: bool = False,
) -> Applied:  # fmt: skip
    """Store what an extraction found, whoever extracted it (the per-mail call, the session review).

    With ``grounding`` (the person's own words), each memory and each change is first cut to the sentences those
    words support (agent/grounding.py): a model's advice, refusal, question or invented value is not the
    person's, and a memory or change with nothing left is dropped (counted in ``ungrounded``, logged).

    Updates and contradictions write a new version valid from ``valid_from`` (the old one is closed then; a
    contradiction notes what it contradicts). New memories are deduplicated within the batch (`distinct`) and
    against the user's current memories (cosine >= ``DUPLICATE_SIMILARITY``): a near-duplicate is restated as a
    new version when ``restate`` (the per-mail extraction saw the person's latest wording) or skipped (a review
    of a whole conversation repeats what the per-mail extraction stored), and an explicit "remember" is never
    rewritten. Goals reported done are closed. ``sent`` (the mail's Date) anchors ``valid_until``.
    """
    created: list[int] = []
    updated: list[int] = []
    skipped = 0

    def replaced(memory_id: int) -> str:
        memory = store.get(memory_id, user_id=user_id)
        return memory.content if memory is not None else ""

    extraction, ungrounded = own_words_only(user_id, extraction, grounding, replaced)
    if not keep_secrets:  # issue 35: a secret is kept only when the person asked (``keep_secrets``), then private
        extraction = masked(extraction)
    near = Nearness(store, user_id)
    extraction = aimed_changes(extraction, near)
    extraction = keyed_updates(extraction, store.get_all(user_id, limit=KEYED_ROWS), near)
    changes = [(c, "updated") for c in extraction.updated] + [(c, "contradicted") for c in extraction.contradicted]
    for change, kind in changes:
        metadata = metadata_for(change, source)
        if kind == "contradicted":
            metadata["contradicts"] = change.id  # the email wins: the old memory is closed at the email's Date
        try:
            updated.append(store.update(change.id, change.content, user_id=user_id, valid_from=valid_from,
                                        metadata=metadata, importance=change.importance,
                                        reason=f"{kind} {reason}"))  # fmt: skip
        except StoreError as exc:  # the model named a memory that is not this user's current one
            log.info("extraction: cannot update memory %s: %s", change.id, exc)
            skipped += 1
    fresh: list[NewMemory] = []
    # One fact per memory (agent/facts.py): what the model merged is split, so a later forget or update
    # touches one fact.
    split = [memory.model_copy(update={"content": fact}) for memory in extraction.new for fact in facts(memory.content)]
    for memory in distinct(store, split):
        similar = find_similar(store, user_id, memory.content, DUPLICATE_SIMILARITY)
        if similar:
            known = similar[0].memory
            explicit = known.metadata.get("via") == "remember"  # kept in the person's own words
            reworded = " ".join(known.content.split()).lower() != " ".join(memory.content.split()).lower()
            if restate and reworded and not explicit and not known.immutable:
                updated.append(store.update(known.id, memory.content, user_id=user_id, valid_from=valid_from,
                                            metadata=metadata_for(memory, source),
                                            reason="near-duplicate restated"))  # fmt: skip
            else:
                skipped += 1
            continue
        fresh.append(NewMemory(
            user_id=user_id, content=memory.content, scope=scope_for(memory.type, memory.domain), type=memory.type,
            domain=memory.domain, tags=tuple(memory.tags), importance=memory.importance,
            metadata=metadata_for(memory, source), valid_from=valid_from, expires_at=expiry(memory, sent),
        ))  # fmt: skip
    if fresh:
        created = store.add_many(fresh)
    updated += close_completed(store, user_id, extraction.completed, valid_from, f"reported done {reason}")
    return Applied(created, updated, skipped, ungrounded)


def masked(extraction: Extraction) -> Extraction:
    """``extraction`` with every secret's value masked (`quinn.memory.sensitive.mask`): credentials, one-time
    codes, card and account numbers, government ids."""

    def hide(items: list[Any]) -> list[Any]:  # what held a secret stays private (withheld from shared threads)
        return [m.model_copy(update={"content": mask(m.content), "private": True}) if mask(m.content) != m.content
                else m for m in items]  # fmt: skip

    return extraction.model_copy(update={"new": hide(extraction.new), "updated": hide(extraction.updated),
                                         "contradicted": hide(extraction.contradicted)})  # fmt: skip


def own_words_only(
    user_id: str, extraction: Extraction, grounding: Grounding | None, replaced: Callable[[int], str]
) -> tuple[Extraction, int]:
    """``extraction`` with each memory and change cut to what ``grounding`` supports (a change may also stand on
    the wording it replaces: ``replaced(memory id)``), and how many were dropped whole. Unchanged without
    ``grounding``. The daemon (`apply_extraction`) and the eval (agent/evaluation.py) both cut through it."""
    if grounding is None:
        return extraction, 0
    dropped = 0

    def keep(items: Sequence[Any], changes: bool) -> list[Any]:
        nonlocal dropped
        kept = []
        for item in items:
            content = grounded(item.content, grounding, also=replaced(item.id) if changes else "")
            if not content:
                log.info(
                    "extraction for %s: a %s of %d characters dropped: not in their own words",
                    user_id,
                    getattr(item, "type", None) or "change",
                    len(item.content),
                )  # fmt: skip  (no text of theirs)
                dropped += 1
            else:
                kept.append(item if content == item.content.strip() else item.model_copy(update={"content": content}))
        return kept

    cut = extraction.model_copy(update={
        "new": keep(extraction.new, False), "updated": keep(extraction.updated, True),
        "contradicted": keep(extraction.contradicted, True),
    })  # fmt: skip
    return cut, dropped


class Nearness:
    """Whether a current memory is close enough in meaning to a new text for the text to replace it (issue 32).

    Seen in the 1.5B pilot of bench/long_memory: the small model keys small talk by a vague attribute
    ("location" for "The kids at the school next door were rehearsing a play"), so a key alone let it replace
    "I live in Split now"; and the session review named ids of memories its updates had nothing to do with. A
    replaced memory must be among the new text's ``NEAREST`` nearest current memories of the person, and in the
    nearer half of them: "Alice moved to Porto" is nearest "Alice lives in Lisbon" (cosine 0.77), "I live in Lund
    now" second nearest "I live in Split now" (after "I grew up in Ericeira"); the play is not near the city at
    all. A rank, not a cosine: it means the same for every embedder. Without an embedder there is nothing to
    measure and the key (or the model's id) decides, as before. Runs on the DB thread."""

    def __init__(self, store: MemoryStore, user_id: str) -> None:
        self.store, self.user_id = store, user_id
        self._ranks: dict[str, list[int]] = {}

    def nearest(self, text: str) -> list[int] | None:
        """The ids of the current memories that may be replaced by ``text``, nearest first (None: no vectors)."""
        if self.store.embedder is None:
            return None
        if text not in self._ranks:
            hits = find_similar(self.store, self.user_id, text, -1.0)
            self._ranks[text] = [h.memory.id for h in hits[: min(NEAREST, max(1, len(hits) // 2))]]
        return self._ranks[text]

    def may_replace(self, text: str, memory_id: int) -> bool:
        """Whether ``text`` is near enough ``memory_id`` in meaning to be its next version."""
        near = self.nearest(text)
        return near is None or memory_id in near


def aimed_changes(extraction: Extraction, near: Nearness) -> Extraction:
    """``extraction`` with each update or contradiction whose memory is not near its text (``Nearness``) filed as
    a new memory instead: the model named the wrong id, and a new memory loses nothing (it is deduplicated,
    and may still replace the memory it is about by its key)."""
    changes = [*extraction.updated, *extraction.contradicted]
    astray = [c for c in changes if not near.may_replace(c.content, c.id)]
    if not astray:
        return extraction
    log.info("extraction: %d changes named a memory not near them in meaning; stored as new instead (ids %s)",
             len(astray), [c.id for c in astray])  # fmt: skip
    moved = [ExtractedMemory(**c.model_dump(exclude={"id"})) for c in astray]
    return extraction.model_copy(update={
        "new": [*extraction.new, *moved],
        "updated": [c for c in extraction.updated if c not in astray],
        "contradicted": [c for c in extraction.contradicted if c not in astray],
    })  # fmt: skip


def keyed_updates(extraction: Extraction, current: Sequence[Memory], near: Nearness | None = None) -> Extraction:
    """``extraction`` with each new memory that states the same attribute as a current one (``updates``: same
    ``about`` key) moved to ``updated`` as that memory's next version: decided here, not by the model alone.
    With ``near``, only a memory near the new one in meaning is replaced (``Nearness``)."""
    eligible = [m for m in current if not m.immutable]
    targets = updates.superseded(
        [(m.type, m.about) for m in extraction.new],
        [(m.id, m.type, m.metadata.get("about")) for m in eligible],
        [c.id for c in (*extraction.updated, *extraction.contradicted)],
        [partial(near.may_replace, m.content) for m in extraction.new] if near else None,
    )  # fmt: skip
    if all(target is None for target in targets):
        return extraction
    moved = [
        ChangedMemory(**m.model_dump(), id=t) for m, t in zip(extraction.new, targets, strict=True) if t is not None
    ]
    log.info("extraction: %d new memories replace a current one about the same thing", len(moved))
    return extraction.model_copy(update={
        "new": [m for m, t in zip(extraction.new, targets, strict=True) if t is None],
        "updated": [*extraction.updated, *moved],
    })  # fmt: skip


def close_completed(
    store: MemoryStore, user_id: str, goal_ids: Sequence[int], at: datetime | str | None, reason: str
) -> list[int]:
    """Close the goals the user reported done (only their own current goals); returns the ids closed."""
    closed = []
    for goal_id in goal_ids:
        goal = store.get(goal_id, user_id=user_id)
        if goal is None or not goal.current or goal.type != "goal":
            log.info("extraction: %s is not a current goal of this user; not closed", goal_id)
            continue
        store.complete(goal_id, user_id=user_id, at=at, reason=reason)
        closed.append(goal_id)
    return closed
