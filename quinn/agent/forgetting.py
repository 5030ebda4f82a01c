"""What "forget that …" takes away, in text (issue 35): which text mentions the forgotten fact, and a text
rewritten without it (pure).

A forget reaches everything written from the fact, not only its memory: the short-term state, conversation
reviews, thread summaries, passages of past mail and the graph (``reach`` applies it), and a memory
that holds several facts loses only the forgotten one ("lives in Lisbon, has a dog called Biscuit and is
allergic to peanuts" without the dog keeps the city and the allergy).

What the request names decides what counts as a mention: its names and numbers ("Berlin", "4111") when it has
any, matched as words; otherwise its content words ("dog"), all of one or two, three quarters of more, by word
or 5-letter stem ("my old address" does not reach "Alice's email address").
A text is cut by sentence, then by clause (commas, semicolons, "and", "but"), so what remains is the person's
other facts in the same words.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

from quinn.agent import learning, state
from quinn.db import Database
from quinn.documents import library
from quinn.mailbox import Sessions, outbox
from quinn.memory import (
    Memory,
    MemoryStore,
    content_words,
    forget_in_graph,
    retire_earlier,
    rewrite_passages,
    rewrite_sources,
)

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
# Each alternative starts where a whitespace run starts (or at the comma): unanchored, "\s*," retried at every
# space of a long run was quadratic (16,000 spaces: 7 s) on a stranger's text.
_CLAUSE = re.compile(r"(?:(?<!\s)\s+)?[,;]\s*(?:and\s+|but\s+)?|(?<!\s)\s+(?:and|but)\s+", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_LABEL = re.compile(r"^([^:]{1,80}:\s+)(\S.*)$", re.DOTALL)  # 'Summary of the email thread "Trip": ...'
_LEAD = re.compile(r"^\s*(?:that|about|the fact that|my|me)\s+", re.IGNORECASE)
_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_ITEM = re.compile(r"^[ \t>]*(?:[-*•]|\d+[.)])\s", re.MULTILINE)  # a list's item (quoted too)
NOT_NAMES = frozenset({"I", "I'm", "I've", "I'd", "I'll", "Please", "That", "The", "My", "Forget"})
STEM = 5
SHARE = 0.75  # of the request's content words a text must hold to mention it (all of one or two words)


def _stem(word: str) -> str:
    return word.lower()[:STEM]


@dataclass(frozen=True)
class Forgetting:
    """The fact a person asked to forget, as the words that mention it."""

    request: str
    names: frozenset[str]  # names and numbers, lower-cased
    words: frozenset[str]  # content words' stems, when the request names nothing

    @classmethod
    def of(cls, request: str) -> Forgetting:
        """The mentions of ``request`` ("that I live in Berlin", "my dog")."""
        text = _LEAD.sub("", request.strip())
        tokens = _WORD.findall(text)
        names = {t.lower() for t in tokens if (t[:1].isupper() and t not in NOT_NAMES) or t.isdigit()}
        words = {_stem(w) for w in content_words(text)} - {_stem(n) for n in names}
        return cls(request, frozenset(names), frozenset(words))

    def beside(self, texts: list[str]) -> Forgetting:
        """Without the names most of ``texts`` hold (the person's own name in "forget that Alice lives in
        Berlin": every memory of hers names her, and the fact is Berlin)."""
        if len(texts) < 2:
            return self
        common = {
            n for n in self.names if sum(n in {t.lower() for t in _WORD.findall(x)} for x in texts) * 2 > len(texts)
        }
        if not common or common == self.names:
            return self
        return Forgetting(self.request, self.names - common, self.words)

    @classmethod
    def of_memory(cls, memory: Memory, others: list[str]) -> Forgetting:
        """The fact a memory held, forgotten by its id: its content's mentions without the person's own name,
        both the names most of their memories (``others``) hold and those in their address ("alice" of
        alice@example.com), so "Alice lives in Berlin" reaches what mentions Berlin, not all that names Alice."""
        fact = cls.of(memory.content).beside([memory.content, *others])
        own = {t.lower() for t in _WORD.findall((memory.user_id or "").split("@")[0].replace("_", " "))}
        names = {n for n in fact.names if re.split(r"['’]", n)[0] not in own}  # "alice's" is hers too
        return cls(fact.request, frozenset(names), fact.words) if names != fact.names else fact

    def besides_person(self, *names: str) -> Forgetting:
        """Without the person's own names (their address and display name): "forget that Alice lives in Berlin",
        from Alice, is about Berlin, not about everything that names her."""
        own = {w.lower() for n in names for w in _WORD.findall(n.split("@")[0].replace("_", " ").replace(".", " "))}
        kept = {n for n in self.names if re.split(r"['’]", n)[0] not in own}
        return Forgetting(self.request, frozenset(kept), self.words) if kept != self.names else self

    def record(self) -> dict[str, object]:
        """As stored beside mail still to be learnt from (``learning.note_forget``)."""
        return {"request": self.request, "names": sorted(self.names), "words": sorted(self.words)}

    @classmethod
    def of_record(cls, record: dict[str, object]) -> Forgetting:
        """The inverse of ``record``."""
        names, words = record.get("names") or [], record.get("words") or []
        assert isinstance(names, list) and isinstance(words, list)
        return cls(str(record.get("request", "")), frozenset(map(str, names)), frozenset(map(str, words)))

    @property
    def empty(self) -> bool:
        """Whether the request names nothing a text could be matched on."""
        return not self.names and not self.words

    def mentions(self, text: str) -> bool:
        """Whether ``text`` mentions the fact."""
        if not text or self.empty:
            return False
        tokens = {t.lower() for t in _WORD.findall(text)}
        if self.names:  # "Edda's new job" mentions Edda
            return bool(self.names & (tokens | {re.split(r"['’]", t)[0] for t in tokens}))
        stems = {_stem(t) for t in tokens}
        return len(self.words & stems) >= max(1, math.ceil(len(self.words) * SHARE))

    def without(self, text: str) -> str:
        """``text`` without the sentences, or within a sentence the clauses, that mention the fact ("" when
        nothing else is left). A sentence whose subject went with a dropped first clause gets it back; a label
        before a colon ('Summary of the email thread "Trip": ') stays with what is left after it."""
        kept: list[str] = []
        for whole in _SENTENCE.split(text.strip()):
            if not self.mentions(whole):
                kept.append(whole)
                continue
            labelled = _LABEL.match(whole)
            label, sentence = ("", whole)
            if labelled and not self.mentions(labelled.group(1)):
                label, sentence = labelled.group(1), labelled.group(2)
            end = sentence[-1] if sentence[-1:] in ".!?" else "."
            body = sentence.rstrip(".!? ")
            clauses = [c for c in _CLAUSE.split(body) if c.strip()]
            rest = [c.strip() for c in clauses if not self.mentions(c)]
            if not rest or len(rest) == len(clauses):
                continue  # all of it mentions the fact (or no clause does alone): the whole sentence goes
            if rest[0] != clauses[0].strip() and rest[0][:1].islower():
                subject = clauses[0].split()[0]
                if subject[:1].isupper():
                    rest[0] = f"{subject} {rest[0]}"
            joined = rest[0] if len(rest) == 1 else ", ".join(rest[:-1]) + " and " + rest[-1]
            kept.append(label + joined[:1].upper() + joined[1:] + end)
        return " ".join(kept).strip()

    def rewrite(self, text: str) -> str | None:
        """``text`` without the fact, or None when it does not mention it (nothing to write)."""
        return self.without(text) if self.mentions(text) else None

    def rewrite_mail(self, text: str) -> str | None:
        """``rewrite`` for a mail's text: a paragraph at a time (a list an item at a time), so what is left keeps
        its layout; a paragraph left empty goes. None when it does not mention the fact."""
        if not self.mentions(text):
            return None
        kept: list[str] = []
        for paragraph in _PARAGRAPH.split(text):
            units = paragraph.split("\n") if _ITEM.search(paragraph) else [paragraph]
            left = [unit if (new := self.rewrite(unit)) is None else new for unit in units]
            if any(unit.strip() for unit in left):
                kept.append("\n".join(unit for unit in left if unit.strip() or len(units) == 1))
        return "\n\n".join(kept)


#: A summary written after a forget that was all about the forgotten fact (scheduler/session_close.py, summarize.py).
FORGOTTEN_SUMMARY = "They asked to forget something they had told you."


def noted(db: Database, message_id: str) -> list[Forgetting]:
    """What the person asked to forget while ``message_id`` waited to be learnt from (``learning.note_forget``)."""
    return [Forgetting.of_record(r) for r in learning.forgets_of(db, message_id)]


def without_in_mail(text: str, facts: list[Forgetting]) -> str:
    """A mail's ``text`` without what any of ``facts`` mentions, its layout kept (``Forgetting.rewrite_mail``)."""
    for fact in facts:
        if (rewritten := fact.rewrite_mail(text)) is not None:
            text = rewritten
    return text


def without_all(text: str, facts: list[Forgetting]) -> str:
    """``text`` without what any of ``facts`` mentions (``Forgetting.without``)."""
    for fact in facts:
        if fact.mentions(text):
            text = fact.without(text)
    return text


#: What ``reach`` changed, by where, as the reply names it.
WHERE = {
    "user_state": ("note of our recent conversations", "notes of our recent conversations"),
    "conversation_summaries": ("conversation review", "conversation reviews"),
    "sessions": ("thread summary", "thread summaries"),
    "sources": ("memory's source email subject", "memories' source email subjects"),
    "passages": ("passage of past mail", "passages of past mail"),
    "files": ("file you sent", "files you sent"),
    "messages": ("stored copy of our emails", "stored copies of our emails"),
    "graph": ("link between people and places", "links between people and places"),
    "earlier": ("earlier value", "earlier values"),
    "outbox": ("copy of a sent reply", "copies of sent replies"),
    "learning": ("mail not yet learnt from", "mails not yet learnt from"),
}


def reach(store: MemoryStore, user_id: str, forgetting: Forgetting, memory_ids: list[int]) -> dict[str, int]:
    """Take the fact out of everything written from it besides memories (runs on the DB thread): the user's
    short-term state and conversation reviews, thread summaries and subjects, the subjects memories name as
    their source, the stored copies of their mail and Quinn's replies (a thread's next mail shows its earlier
    ones to the model), passages of past mail, the graph (the relations of ``memory_ids``, the forgotten
    memories, and the entities it names), the earlier values recall shows beside current memories (issue 32) and
    the raw copies of replies sent, the names of the files they sent and the bytes of those that mention it; the
    mail still waiting to be learnt from is noted, so it is learnt without
    the fact (``learning.note_forget``). Returns what changed where."""
    if forgetting.empty:
        return {}
    done = state.rewrite_mentions(store.db, user_id, forgetting.rewrite)
    done["sessions"] = Sessions(store.db).rewrite_summaries(user_id, forgetting.rewrite)
    done["messages"] = Sessions(store.db).rewrite_messages(user_id, forgetting.rewrite_mail)
    # Files first: their passages' text, still as it was, says which files mention the fact.
    done["files"] = library.forget_in_files(store.db, user_id, forgetting.mentions)
    rename = functools.partial(library.renamed, mentions=forgetting.mentions)
    done["passages"] = rewrite_passages(store.db, user_id, forgetting.rewrite, rename)
    done["sources"] = rewrite_sources(store.db, user_id, forgetting.rewrite)
    done["graph"] = forget_in_graph(store, user_id, forgetting.mentions, memory_ids)
    done["earlier"] = retire_earlier(store.db, user_id, forgetting.mentions)
    done["outbox"] = outbox.blank_mentions(store.db, user_id, forgetting.mentions)
    done["learning"] = learning.note_forget(store.db, user_id, forgetting.record(), forgetting.mentions)
    return {where: n for where, n in done.items() if n}


def forget_by_id(
    store: MemoryStore,
    memory_id: int,
    *,
    user_id: str | None = None,
    reason: str | None = None,
    allow_immutable: bool = False,
) -> dict[str, int]:
    """Forget one memory by its id (the model's forget tool, the console, ``quinn memory forget``, "forget 2" in
    reply to a digest) and take its fact out of what was written from it (``reach``, with ``Forgetting.of_memory``);
    runs on the DB thread. Returns what else changed, by where. Raises as
    ``MemoryStore.forget`` (unknown, someone else's, immutable)."""
    store.forget(memory_id, user_id=user_id, reason=reason, allow_immutable=allow_immutable)
    memory = store.get(memory_id)
    assert memory is not None  # forget raised otherwise
    if memory.user_id is None:
        return {}
    others = [m.content for m in store.get_all(memory.user_id, limit=10_000)]
    fact = Forgetting.of_memory(memory, others)
    return reach(store, memory.user_id, fact, [memory.id, memory.root_id or memory.id])


def described(done: dict[str, int]) -> str:
    """``done`` as the reply says it: "2 notes of our recent conversations, 1 thread summary"."""
    return ", ".join(f"{n} {WHERE[where][n != 1]}" for where, n in done.items() if n and where in WHERE)
