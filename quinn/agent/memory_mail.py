"""Memory by email: the simple commands a user can write, and what they do to that user's memory.

"remember …", "forget …", "what do you know about me?", "export my memory" and "delete everything you know
about me" are recognised in the clean text of the mail (quotes and signature already stripped), so a quoted
earlier mail never triggers one. Any other wording reaches the model, which has the memory tools. The purge and
the export need a confirmation: Quinn answers with a question carrying a single-use code (agent/confirm.py),
sent only to the user's own address, and only a reply that starts with "yes" and carries the code acts.
Commands are only ever carried out for a trusted sender (mailbox/policy.py); anyone else is told why not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from quinn.agent import digest
from quinn.agent.extract import DUPLICATE_SIMILARITY
from quinn.agent.forgetting import Forgetting, reach, without_all, without_in_mail
from quinn.agent.tools import MemoryChange
from quinn.clock import iso, utcnow
from quinn.memory import NOT_WIPED, Memory, MemoryStore, Passage, content_words, find_similar, hybrid_search

RequestKind = Literal["remember", "forget", "digest", "export", "purge", "stop", "resume"]
FORGET_MIN_OVERLAP = 0.5  # share of the request's content words a memory must contain to be forgotten
REMEMBER_IMPORTANCE = 0.8  # an explicit "remember" outranks what the model judged worth keeping (0.5 by default)
PURGE_CONFIRM_TEMPLATE = "purge_confirm"
PURGE_DONE_TEMPLATE = "purge_done"
EXPORT_CONFIRM_TEMPLATE = "export_confirm"
EXPORT_DONE_TEMPLATE = "export_done"
CONFIRM_FAILED_TEMPLATE = "confirm_failed"
REFUSED_TEMPLATE = "memory_refused"
#: Answers nothing may be learnt from: the questions, the confirmations and their answers, refusals.
NO_LEARNING_TEMPLATES = frozenset({PURGE_CONFIRM_TEMPLATE, PURGE_DONE_TEMPLATE, EXPORT_CONFIRM_TEMPLATE,
                                   EXPORT_DONE_TEMPLATE, CONFIRM_FAILED_TEMPLATE, REFUSED_TEMPLATE})  # fmt: skip

# No two whitespace runs meet without a character between them ("\s*,?\s+" would be one that splits a run
# of spaces in quadratically many ways: 8,000 spaces took 12 s of the event loop).
_LEAD = (
    r"(?:^|(?<=[.!?\n,;:]))\s*(?:(?:hi|hello|hey|dear)\s+\w+\s*(?:[,!]\s*)?)?(?:(?:also|and|then|now)(?:\s*,)?\s+)?"
    r"(?:(?:please|pls|kindly)(?:\s*,)?\s+)?"
)
_PATTERNS: tuple[tuple[RequestKind, re.Pattern[str]], ...] = (
    ("purge", re.compile(
        r"\b(?:delete|erase|remove|forget|wipe)\s+(?:absolutely\s+)?(?:everything|all)\s+(?:that\s+)?"
        r"(?:you\s+(?:know|have|remember|store)(?:\s+about\s+me)?|about\s+me|of\s+my\s+data|my\s+(?:data|memor(?:y|ies)))",
        re.IGNORECASE)),
    ("resume", re.compile(
        r"\b(?:you\s+(?:may|can)\s+(?:now\s+)?(?:start\s+)?remember(?:ing)?\s+me\s+again|"
        r"(?:please\s+)?(?:start|resume)\s+remembering\s+(?:me|things\s+about\s+me)(?:\s+again)?)\b",
        re.IGNORECASE)),
    ("stop", re.compile(
        r"\b(?:stop|quit)\s+remembering\s+(?:me|(?:things|anything)\s+about\s+me|what\s+i\s+(?:say|tell\s+you))"
        r"|\b(?:do\s+not|don'?t)\s+(?:remember|store|keep)\s+anything\s+(?:(?:new\s+)?about\s+me|i\s+(?:say|write|tell\s+you))",
        re.IGNORECASE)),
    ("digest", re.compile(
        r"\bwhat\s+(?:do|did)\s+you\s+(?:know|remember|have\s+stored|store)\s+about\s+me\b", re.IGNORECASE)),
    ("export", re.compile(r"\bexport\s+(?:all\s+(?:of\s+)?)?my\s+(?:memor(?:y|ies)|data)\b", re.IGNORECASE)),
    ("remember", re.compile(_LEAD + r"remember\s+(?:that\s+)?(?P<what>[^.!?\n]{3,})", re.IGNORECASE)),
    ("forget", re.compile(
        _LEAD + r"forget\s+(?:that\s+|about\s+|what\s+i\s+said\s+about\s+)?(?P<what>[^.!?\n]{3,})", re.IGNORECASE)),
)  # fmt: skip
_YES = re.compile(r"^\s*(?:yes|yep|confirm(?:ed)?|delete\s+everything)\b", re.IGNORECASE)


@dataclass(frozen=True)
class MemoryRequest:
    """One memory command found in a mail; ``argument`` is what to remember or forget."""

    kind: RequestKind
    argument: str = ""


def parse_requests(text: str) -> list[MemoryRequest]:
    """The memory commands in ``text`` (the mail without quotes), in a fixed order of precedence."""
    found: list[MemoryRequest] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if kind == "forget" and any(r.kind == "purge" for r in found):
                continue  # "forget everything you know about me" is the purge, not a forget
            what = match.groupdict().get("what") or ""
            found.append(MemoryRequest(kind, " ".join(what.split()).strip(" ,;:")))
            if kind in ("purge", "digest", "export", "resume", "stop"):
                break
    return found


def forgets_in(texts: Sequence[str], *person: str) -> list[Forgetting]:
    """The facts the person asked, in ``texts`` (their own mails of one conversation), to forget, each as the
    words that mention it, without their own names (``person``); "forget 2" (a digest item) is none.

    What is written later from that conversation must leave them out, not only what existed when the forget
    ran: in bench/long_memory the review of Kwame's "Please forget that my brother Edda has just started a new job
    as a zookeeper" summed the thread up as "forgetting ... Edda's new job as a zookeeper", and that summary, shown
    with every later mail, answered "What is Edda's new job?"."""
    found: list[Forgetting] = []
    for text in texts:
        for request in parse_requests(text):
            if request.kind != "forget" or digest.corrections(f"forget {request.argument}"):  # as Agent reads it
                continue
            fact = Forgetting.of(request.argument).besides_person(*person)
            if not fact.empty and fact not in found:
                found.append(fact)
    return found


def kept_reply(body: str, changes: Sequence[MemoryChange], request_text: str, *person: str) -> str:
    """The copy of a reply Quinn keeps in the conversation (the thread's next mail shows it to the model): without
    what that reply's mail had forgotten, asked in its text (``forgets_in``) or by number (a forgotten memory's
    words, which the footer lists and the model may repeat). The person's mailbox gets the reply as sent."""
    return without_in_mail(body, forgotten_by(changes, request_text, *person))


def forgotten_by(changes: Sequence[MemoryChange], request_text: str, *person: str) -> list[Forgetting]:
    """What a mail forgot: asked in its text (``forgets_in``), or by number (a forgotten memory's words)."""
    facts = forgets_in([request_text], *person)
    return facts + [Forgetting.of(c.content).besides_person(*person) for c in changes if c.action == "forgotten"]


def kept_subject(subject: str, changes: Sequence[MemoryChange], request_text: str, *person: str) -> str:
    """``kept_reply`` for a subject ("Re: Edda's new job" after "forget that my brother Edda has a new job"): as
    Quinn's stored reply and the source of what is learnt from that mail carry it, written after the forget ran."""
    return without_all(subject, forgotten_by(changes, request_text, *person))


def learnable_text(text: str) -> str:
    """What extraction may learn from a mail that holds memory commands: the statement of a "remember …" stays
    (it is about the person, and may update or contradict what is known), the other commands go (they are
    requests, not facts). A mail asking for a purge teaches nothing: the empty string."""
    requests = parse_requests(text)
    if any(r.kind == "purge" for r in requests):
        return ""
    for kind, pattern in _PATTERNS:
        if kind == "remember":
            text = pattern.sub(lambda m: f" {m.group('what').strip()}", text)
        elif kind in ("forget", "digest", "export", "stop", "resume"):
            text = pattern.sub(" ", text)
    return text.strip()


def confirms(text: str) -> bool:
    """The reply to a confirmation question says yes in its first words (a quoted question never does)."""
    return bool(_YES.match(text))


def remember(store: MemoryStore, user_id: str, name: str, what: str, source: dict[str, Any],
             valid_from: Any = None) -> MemoryChange:  # fmt: skip
    """Save an explicit "remember …" as a profile fact (always in the prompt); idempotent per email.

    It goes through the dedupe extraction uses: a current memory that says the same (cosine >= the extraction's
    ``DUPLICATE_SIMILARITY``) gets a new version in the person's words instead of a twin. What the statement
    contradicts ("remember that I moved to Porto" against "lives in Lisbon") is the extraction's to judge: it
    runs on the same mail after the reply (`learnable_text`) and supersedes through the same path.
    """
    content = f"{name} asked to remember: {what}"
    message_id = (source.get("source") or {}).get("message_id")
    for memory in store.get_all(user_id, scope="profile", limit=500):
        same_mail = (memory.metadata.get("source") or {}).get("message_id") == message_id
        if same_mail and memory.content == content:  # a retry after a crash: already done
            return MemoryChange("saved", memory.id, content)
    metadata = {**source, "via": "remember", "confidence": "high"}
    similar = [h for h in find_similar(store, user_id, content, DUPLICATE_SIMILARITY) if not h.memory.immutable]
    if similar:
        old = similar[0].memory
        memory_id = store.update(old.id, content, user_id=user_id, valid_from=valid_from, metadata=metadata,
                                 importance=max(old.importance, REMEMBER_IMPORTANCE),
                                 reason=f"restated by an explicit remember in {message_id}")  # fmt: skip
        return MemoryChange("saved", memory_id, content)
    memory_id = store.add(user_id, content, scope="profile", type="fact", importance=REMEMBER_IMPORTANCE,
                          metadata=metadata, valid_from=valid_from)  # fmt: skip
    return MemoryChange("saved", memory_id, content)


@dataclass(frozen=True)
class Forgot:
    """What "forget …" did: the memory changes (a memory forgotten whole, or rewritten without the fact when it
    held others too), and what else written from the fact was changed, by where (``forgetting.reach``)."""

    changes: list[MemoryChange]
    elsewhere: dict[str, int]


def forget(store: MemoryStore, user_id: str, what: str, private_ok: bool) -> Forgot | None:
    """Forget what ``what`` names (issue 35); None when nothing Quinn keeps mentions it.

    The memory that best matches it, if one clearly does, and every other current memory that mentions the fact
    (its names, or its words: ``forgetting.Forgetting``): one that holds other facts too gets a new version
    without it (the rest kept, and said so); one that holds nothing else is forgotten. Then the fact leaves what
    was written from it: the short-term state, conversation reviews, thread summaries, passages and the graph.
    A private memory is not touched with others on the mail; an immutable one never."""
    wanted = content_words(what)
    if not wanted:
        return None
    target = None
    for hit in hybrid_search(store, user_id, what, k=5, touch=False):
        memory = hit.memory
        if memory.immutable or (memory.private and not private_ok):
            continue
        if len(wanted & content_words(memory.content)) / len(wanted) >= FORGET_MIN_OVERLAP:
            target = memory
            break
    current = store.get_all(user_id, limit=10_000)
    fact = Forgetting.of(what).beside([m.content for m in current])
    others = [m for m in current if (target is None or m.id != target.id) and fact.mentions(m.content)
              and not m.immutable and (private_ok or not m.private)]  # fmt: skip
    changes: list[MemoryChange] = []
    gone: list[int] = []
    reason = f'asked by email: "forget {what}"'
    # No current memory may hold the fact any more (replaced since, or never a memory of its own) while an
    # earlier value, a passage of their mail or a summary still does: the forget reaches those all the same
    # (the 1.5B pilot's "forget that I grew up in Ericeira" found no current memory and scrubbed nothing).
    for memory in ([target] if target is not None else []) + others:
        rest = fact.without(memory.content) if fact.mentions(memory.content) else ""
        if rest and content_words(rest) and rest != memory.content:
            new_id = store.update(
                memory.id, rest, user_id=user_id, reason=f"{reason}; the rest kept", metadata={"forgot": iso(utcnow())}
            )  # fmt: skip  (context.context_block says so)
            changes.append(MemoryChange("rewritten", new_id, rest))
        else:
            store.forget(memory.id, user_id=user_id, reason=reason)
            changes.append(MemoryChange("forgotten", memory.id, memory.content))
            gone += [memory.id, memory.root_id or memory.id]
    elsewhere = reach(store, user_id, fact, gone)
    return Forgot(changes, elsewhere) if changes or elsewhere else None


def digest_groups(memories: Sequence[Memory]) -> list[dict[str, Any]]:
    """Memories grouped by type and domain, with dates and source emails, for the digest template."""
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for memory in sorted(memories, key=lambda m: (m.type, m.domain or "", m.valid_from)):
        source = memory.metadata.get("source") or {}
        subject = source.get("subject")
        date = (source.get("date") or "")[:10]
        groups.setdefault((memory.type, memory.domain), []).append({
            "id": memory.id, "content": memory.content, "since": memory.valid_from[:10],
            "source": f"{subject}, {date}" if subject and date else subject or "",
        })  # fmt: skip
    return [
        {"title": _title(type_, domain), "memories": items} for (type_, domain), items in sorted(groups.items(),
                                                                                              key=lambda g: g[0][0])
    ]  # fmt: skip


def _title(type_: str, domain: str | None) -> str:
    plural = {"personal": "Personal details", "feedback": "Feedback", "context": "Context"}.get(type_)
    title = plural or f"{type_.capitalize()}s"
    return f"{title} ({domain})" if domain else title


def export_json(
    user_id: str, memories: Sequence[Memory], withheld: int = 0, passages: Sequence[Passage] = (),
    withheld_passages: int = 0, shaping: dict[str, Any] | None = None,
    versions: dict[int, list[dict[str, Any]]] | None = None,
) -> bytes:  # fmt: skip
    """The user's memories as a JSON document (the export form of ``Memory.to_record``), and the passages of
    past mail that conversation recall holds (issue 14), oldest first; a passage of an attached file names the file
    and where in it (issue 18); with ``shaping`` (agent/known.py) everything else that shapes replies, and each
    memory's ``versions`` (number, change, time) by its root id (issue 35)."""
    document = {
        "user": user_id, "exported_at": iso(utcnow()), "count": len(memories),
        "withheld_private": withheld,
        "memories": [{**m.to_record(), **({"versions": versions.get(m.root_id or m.id, [])} if versions else {})}
                     for m in memories],
        "conversation": [{"date": p.sent_at, "direction": p.direction, "subject": p.subject, "text": p.content,
                          **({"file": p.document, "where": p.ref} if p.document else {})} for p in passages],
        "withheld_conversation": withheld_passages,
        **(shaping or {}),
    }  # fmt: skip
    return json.dumps(document, ensure_ascii=False, indent=2).encode("utf-8")


_HOW_TO_CONFIRM = (
    "To confirm, reply to this email with YES as the first word and keep this email quoted below your answer (or "
    "copy the code {code} into it). The code works once, for 24 hours, and only from {address}. If you did not "
    "ask for this, ignore this email and nothing will happen."
)


def purge_question(address: str, code: str) -> str:
    """The confirmation question; only a reply that starts with "yes" and carries ``code`` purges."""
    return (
        f"You asked me to delete everything I know about you ({address}): every memory, our past conversations "
        "and their history, and your emails and my replies in my mailbox. This cannot be undone.\n\n"
        f"Confirmation code: {code}\n\n" + _HOW_TO_CONFIRM.format(code=code, address=address)
    )


def export_question(address: str, code: str) -> str:
    """The question before an export; the export goes to ``address`` only, after a "yes" carrying ``code``."""
    return (
        f"You asked me to send you everything I remember about you ({address}) as a file.\n\n"
        f"Confirmation code: {code}\n\n" + _HOW_TO_CONFIRM.format(code=code, address=address)
    )


def export_sent(count: int) -> str:
    """The answer that carries the export."""
    return (
        f"Here is everything I remember about you: {count} memories, attached as JSON. This email went only to "
        "your own address."
    )


CONFIRM_FAILED = (
    "Your reply carries a confirmation code, but not one I can accept: it has expired (codes work for 24 hours), "
    "was already used, or was not sent to this address. I did nothing. Ask again if you still want it."
)


def refused(why: str) -> str:
    """The answer to a memory command (or a confirmation) in a mail that may not use memory."""
    return f"I did not carry out what you asked about your memory. {why}"


# What a purge removed, in the user's words: (singular, plural) per table of ``MemoryStore.purge``'s counts.
# Bookkeeping a user never saw (which session retrieved which memory, the ids of a thread) is left out of the
# receipt; the operator's log has every count.
PURGED_AS = {
    "memories": ("memory", "memories"),
    "memory_versions": ("earlier version of a memory", "earlier versions of memories"),
    "sessions": ("conversation", "conversations"),
    "messages": ("message of our conversations", "messages of our conversations"),
    "passages": ("searchable passage of them", "searchable passages of them"),
    "documents": ("file you sent me", "files you sent me"),
    "conversation_summaries": ("conversation summary", "conversation summaries"),
    "user_state": ("setting", "settings"),
    "entities": ("person, place or thing I knew of", "people, places and things I knew of"),
    "relationships": ("link between them", "links between them"),
    "outbox": ("reply kept for sending", "replies kept for sending"),
    "llm_usage": ("token usage record", "token usage records"),
    "mail_state": ("record of an email you sent (unlinked from you)", "records of emails you sent (unlinked from you)"),
}


def purge_report(counts: dict[str, int]) -> str:
    """The answer after a purge, saying what was removed."""
    removed = ", ".join(f"{n} {PURGED_AS[table][n != 1]}" for table, n in counts.items() if n and table in PURGED_AS)
    # Said, not hidden (issue 35): a reader of the database file kept the deleted rows' bytes in it for now.
    not_wiped = (
        " One caveat: another program was reading my database while I deleted, so the deleted text may still sit "
        "in the database file's unused space until it is rewritten; my operator has been told."
        if counts.get(NOT_WIPED) else ""
    )  # fmt: skip
    return (
        "Done: I deleted everything I knew about you"
        + (f" ({removed})" if removed else "")
        + ". Your emails and my replies are being deleted from my mailbox too. I no longer remember anything"
        " about you; if you write again, I start from scratch." + not_wiped
    )


def changes_footer(changes: Sequence[MemoryChange], elsewhere: Sequence[str] = ()) -> str:
    """The block appended to a reply that changed memory, so every change is reported (and, for a forget, where
    else the fact was taken out: issue 35, said even when no memory held it yet)."""
    if not changes and not elsewhere:
        return ""
    lines = [f"- {c.describe()}" for c in changes] + [f"- also taken out of: {where}" for where in elsewhere]
    return "\n\n---\nChanges to what I remember about you:\n" + "\n".join(lines)
