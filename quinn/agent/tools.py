"""Memory tools for the reply model: search, save, update, forget, and search past mail, as Mirascope context tools.

The user is bound in the typed deps (``MemoryDeps``), never a tool argument, so the model cannot reach anyone
else's memory. A refusal (another user's memory, an immutable one, a private one while others are on the
thread) comes back to the model as a clear sentence it can act on, never as an exception. Every change is
recorded in ``deps.changes`` so the reply can report it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, ParamSpec, TypeVar

from mirascope import llm

from quinn.agent.forgetting import described, forget_by_id
from quinn.agent.grounding import Grounding, grounded, mentioned
from quinn.agent.reply_trace import ToolUse
from quinn.errors import StoreError
from quinn.memory import Memory, MemoryStore, NewMemory, hybrid_search, mask, search_passages

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
MemoryType = Literal["preference", "goal", "fact", "decision", "context", "feedback", "personal"]
PROFILE_TYPES = frozenset({"preference", "personal", "feedback"})
SEARCH_LIMIT = 8
READ_ONLY = "Refused: this person asked not to be remembered; nothing new about them is stored."
FORGOTTEN = "Refused: the person asked in this email to forget that; it was forgotten, and must not be saved again."
NOT_THEIRS = ("Refused: the person did not say that in this email; save only what they told you, in their words "
              "(not your advice, and no name or number they did not write).")  # fmt: skip


@dataclass(frozen=True)
class MemoryChange:
    """One change made to a user's memory while answering an email, reported back in the reply."""

    action: Literal["saved", "updated", "forgotten", "rewritten"]
    memory_id: int
    content: str

    def describe(self) -> str:
        """One line for the reply: ``saved [memory:12]: Alice's birthday is October 10.``"""
        return f"{self.action} [memory:{self.memory_id}]: {self.content}"


@dataclass
class MemoryDeps:
    """What the memory tools may touch: one user's memory, through the DB thread."""

    store: MemoryStore
    user_id: str
    run_db: Callable[..., Awaitable[Any]]
    private_ok: bool = True
    others: tuple[str, ...] = ()  # everyone but the user and Quinn on the mail: they see only what they saw
    domains: tuple[str, ...] = ()
    known_domains: tuple[str, ...] = ()
    source: dict[str, Any] = field(default_factory=dict)
    valid_from: datetime | None = None
    changes: list[MemoryChange] = field(default_factory=list)
    read_only: bool = False  # the person asked not to be remembered (agent/consent.py): nothing new is stored
    calls: list[ToolUse] = field(default_factory=list)  # what the model called, for the reply's trace
    grounding: Grounding | None = None  # the person's own words in this mail: what a saved memory must stand on
    keep_secrets: bool = False  # the mail asked to keep something ("remember my IBAN"): its secrets are kept
    # What this mail asked to forget (``Forgetting.mentions`` of each): never saved again in the same reply.
    forgotten: tuple[Callable[[str], bool], ...] = ()

    def asked_to_forget(self, text: str) -> bool:
        """Whether ``text`` mentions something this mail asked to forget."""
        return any(mentions(text) for mentions in self.forgotten)

    def called(self, name: str, memory_ids: tuple[int, ...] = (), found: int | None = None,
               refused: bool = False) -> None:  # fmt: skip
        """Note one tool call for the reply's trace (agent/reply_trace.py): no arguments' text, only ids."""
        self.calls.append(ToolUse(name, memory_ids, found, refused))

    async def db(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``fn`` on the database thread."""
        return await self.run_db(fn, *args, **kwargs)

    def domain(self, name: str | None) -> str | None:
        """A configured domain name, or None (unknown names are not kept: retrieval filters on them)."""
        wanted = (name or "").strip().lower()
        return wanted if wanted in self.known_domains else None


def scope_for(type_: str, domain: str | None) -> str:
    """Preferences, personal details and feedback form the always-present profile; the rest is searched."""
    if type_ in PROFILE_TYPES:
        return "profile"
    return "domain" if domain else "episodic"


def memory_line(memory: Memory) -> str:
    """How a memory is shown to the model: ``[memory:ID] (type, domain, since DATE) content``."""
    where = f"{memory.type}, {memory.domain}" if memory.domain else memory.type
    return f"[memory:{memory.id}] ({where}, since {memory.valid_from[:10]}) {memory.content}"


def _owned(deps: MemoryDeps, memory_id: int) -> Memory | str:
    """The user's current memory ``memory_id``, or the refusal to send back to the model."""
    memory = deps.store.get(memory_id)
    # One answer for "missing", "someone else's" and "private while others read along": no probing of ids.
    if memory is None or memory.user_id != deps.user_id or (memory.private and not deps.private_ok):
        return f"Refused: memory {memory_id} is not one of this person's memories. Use search_memory to find ids."
    if not memory.current:
        return f"Refused: memory {memory_id} was already replaced or forgotten; search again for the current one."
    if memory.immutable:
        return f"Refused: memory {memory_id} is fixed by the operator and cannot be changed or forgotten."
    return memory


@llm.tool
async def search_memory(
    ctx: llm.Context[MemoryDeps], query: str, domain: str | None = None, tags: list[str] | None = None
) -> str:
    """Search what you remember about the person who wrote this email. Returns memories with their ids."""
    deps = ctx.deps
    filters: dict[str, Any] = {}
    if domain and deps.domain(domain):
        filters["domain"] = deps.domain(domain)
    if tags:
        filters["tags"] = [t.strip().lower() for t in tags if t.strip()]
    hits = await deps.db(hybrid_search, deps.store, deps.user_id, query, k=SEARCH_LIMIT, **filters)
    shown = [h.memory for h in hits if deps.private_ok or not h.memory.private]
    deps.called("search_memory", tuple(m.id for m in shown), len(shown))
    lines = [memory_line(m) for m in shown]
    return "\n".join(lines) if lines else "No memories match."


@llm.tool
async def save_memory(
    ctx: llm.Context[MemoryDeps],
    content: str,
    type: MemoryType,
    domain: str | None = None,
    tags: list[str] | None = None,
    importance: float = 0.5,
    private: bool = False,
) -> str:
    """Remember something new about the person: one self-contained sentence in the third person. ``private``:
    health, money, codes, identity numbers or anything shared in confidence (never shown to others)."""
    deps = ctx.deps
    text = " ".join(content.split())
    if deps.read_only or not text or not 0.0 <= importance <= 1.0:
        deps.called("save_memory", refused=True)
    if deps.read_only:
        return READ_ONLY
    if not text:
        return "Refused: content is empty; write the memory as one full sentence."
    if not 0.0 <= importance <= 1.0:
        return f"Refused: importance {importance} must be between 0 and 1."
    if deps.asked_to_forget(text):
        deps.called("save_memory", refused=True)
        return FORGOTTEN
    if deps.grounding is not None:
        text = grounded(text, deps.grounding)
        if not text:
            deps.called("save_memory", refused=True)
            return NOT_THEIRS
    if not deps.keep_secrets:  # issue 35: a secret is kept only when the person asked
        text = mask(text)
    name = deps.domain(domain)
    item = NewMemory(
        user_id=deps.user_id, content=text, scope=scope_for(type, name), type=type, domain=name,
        tags=tuple(sorted({t.strip().lower() for t in tags or () if t.strip()})), importance=importance,
        metadata={**deps.source, "via": "tool", **({"private": True} if private else {})}, valid_from=deps.valid_from,
    )  # fmt: skip
    try:
        [memory_id] = await deps.db(deps.store.add_many, [item])
    except StoreError as exc:
        deps.called("save_memory", refused=True)
        return f"Refused: {exc.message}"
    deps.called("save_memory", (memory_id,))
    deps.changes.append(MemoryChange("saved", memory_id, text))
    log.info("tool save_memory for %s: memory %d", deps.user_id, memory_id)
    return f"Saved as memory {memory_id}."


@llm.tool
async def update_memory(ctx: llm.Context[MemoryDeps], id: int, content: str) -> str:
    """Replace what a memory says (by its id) when the person corrects it or it changed; history is kept."""
    deps = ctx.deps
    text = " ".join(content.split())
    found: Memory | str
    if deps.read_only:
        found = READ_ONLY
    elif not text:
        found = "Refused: content is empty; write the corrected memory as one full sentence."
    elif deps.asked_to_forget(text):
        found = FORGOTTEN
    else:
        found = await deps.db(_owned, deps, int(id))
    if not isinstance(found, str) and deps.grounding is not None:
        text = grounded(text, deps.grounding, also=found.content)
        found = found if text else NOT_THEIRS
    if isinstance(found, str):
        deps.called("update_memory", refused=True)
        return found
    if not deps.keep_secrets:  # issue 35: a secret is kept only when the person asked
        text = mask(text)
    try:
        new_id = await deps.db(deps.store.update, found.id, text, user_id=deps.user_id, valid_from=deps.valid_from,
                               metadata={**deps.source, "via": "tool"}, reason="update_memory tool")  # fmt: skip
    except StoreError as exc:
        deps.called("update_memory", (found.id,), refused=True)
        return f"Refused: {exc.message}"
    deps.called("update_memory", (found.id, new_id))
    deps.changes.append(MemoryChange("updated", new_id, text))
    log.info("tool update_memory for %s: memory %d -> %d", deps.user_id, found.id, new_id)
    return f"Updated: memory {found.id} is now memory {new_id}."


@llm.tool
async def forget_memory(ctx: llm.Context[MemoryDeps], id: int) -> str:
    """Forget a memory (by its id) when the person asks you to or it is wrong."""
    deps = ctx.deps
    found = await deps.db(_owned, deps, int(id))
    if not isinstance(found, str) and deps.grounding is not None and not mentioned(found.content, deps.grounding):
        found = (f"Refused: memory {found.id} is not what this email asks to forget (it shares no word with it). "
                 "Forget only a memory the person asked about; search_memory finds it by their words.")  # fmt: skip
    if isinstance(found, str):
        deps.called("forget_memory", refused=True)
        return found
    try:
        elsewhere = await deps.db(forget_by_id, deps.store, found.id, user_id=deps.user_id,
                                           reason="forget_memory tool")  # fmt: skip
    except StoreError as exc:
        deps.called("forget_memory", (found.id,), refused=True)
        return f"Refused: {exc.message}"
    deps.called("forget_memory", (found.id,))
    deps.changes.append(MemoryChange("forgotten", found.id, found.content))
    log.info("tool forget_memory for %s: memory %d (elsewhere: %s)", deps.user_id, found.id, elsewhere)
    also = f" Also taken out of: {described(elsewhere)}." if elsewhere else ""
    return f"Forgotten: memory {found.id}.{also}"


@llm.tool
async def search_conversations(ctx: llm.Context[MemoryDeps], query: str) -> str:
    """Search your earlier emails with this person (what they wrote and what you replied, and the files they
    attached), e.g. "what did they tell me about the landlord?". Returns passages with the date of their email,
    or the file and page they are from."""
    deps = ctx.deps
    hits = await deps.db(search_passages, deps.store, deps.user_id, query, k=SEARCH_LIMIT, others=deps.others)
    deps.called("search_conversations", found=len(hits))
    lines = [h.passage.line() for h in hits]
    return "\n".join(lines) if lines else "No earlier emails match."


@llm.tool
async def search_documents(ctx: llm.Context[MemoryDeps], query: str) -> str:
    """Search only files: those this person attached to their emails (PDFs, documents, spreadsheets, invites) and
    the knowledge base everyone shares, e.g. "the deposit in the lease". Returns passages citing the file and
    page, e.g. [doc:lease.pdf p.2]."""
    deps = ctx.deps
    hits = await deps.db(search_passages, deps.store, deps.user_id, query, k=SEARCH_LIMIT, others=deps.others,
                         documents_only=True)  # fmt: skip
    deps.called("search_documents", found=len(hits))
    lines = [h.passage.line() for h in hits]
    return "\n".join(lines) if lines else "No file matches."


MEMORY_TOOLS = (search_memory, save_memory, update_memory, forget_memory, search_conversations, search_documents)
