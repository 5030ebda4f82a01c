"""Context assembly: what the model sees for one email. Pure: data in, template variables out.

One token budget covers the whole memory block: the always-present profile takes at most ``PROFILE_SHARE`` of
it, retrieved memories and passages of past conversations (issue 14) the rest, each at least half of it when
both have enough to fill it, and either all of it when the other leaves it unused. Memories that are superseded,
forgotten or expired never appear; neither do private ones (personal details, PII) when anyone but the user is
on From/To/Cc, nor passages of mail those others did not see. When domains were detected for the email,
retrieved memories are kept to those domains, to memories without a domain, and to global ones.

Over time (issue 32): a memory that replaced an earlier version of itself carries that version on its line
("earlier: X (until DATE)"), one only, when the caller found one (the agent looks only when the email looks
back in time, ``query.looks_back``); every line carries its date. When the person's whole past mail (their own
text) fits what the profile leaves of the budget, it is sent whole, oldest first, instead of retrieved passages.
When nothing was recalled for the email, the template is told (``recalled_nothing``) so the model says it does
not know rather than guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from quinn.clock import iso
from quinn.documents import Extracted
from quinn.mailbox import InboundEmail
from quinn.memory import Memory, Passage, PassageHit, SearchHit

#: After a memory rewritten by "forget …": the 1.5B run of bench/long_memory, asked the brand of the car whose
#: brand had been forgotten, invented one ("a Toyota Camry") from "I finally replaced the old car."
FORGOT_NOTE = "they asked you to forget more of what this said"
PROFILE_SHARE = 0.4  # at most this share of the memory budget goes to the always-present profile


@dataclass(frozen=True)
class ThreadMessage:
    """One earlier message of the thread, as the template sees it."""

    sender: str
    date: str
    body: str
    message_id: str = ""  # its passages are not repeated from conversation recall


@dataclass(frozen=True)
class ReplyInputs:
    """Everything known before the reply prompt is rendered."""

    email: InboundEmail
    user_id: str
    assistant_name: str
    assistant_address: str
    today: str
    memory_enabled: bool = True
    persona: Sequence[Memory] = ()
    profile: Sequence[Memory] = ()
    hits: Sequence[SearchHit] = ()
    passages: Sequence[PassageHit] = ()  # past conversation, found for this email (memory/passages.py)
    state: dict[str, str] = field(default_factory=dict)
    thread: Sequence[ThreadMessage] = ()
    thread_summary: str | None = None
    token_budget: int = 1200
    domains: Sequence[str] = ()
    now: datetime | None = None
    actions: Sequence[str] = ()
    documents: Sequence[Extracted] = ()  # the email's attachments as read (issue 18); () when none were read
    document_tokens: int = 2000  # their text's share of the prompt, all files together
    mail_tokens: int | None = None  # the new mail's text in the prompt, at most ([budget], by trust; None: all)
    attachments_listed: int | None = None  # attachments listed, at most ([budget], by trust; None: all)
    earlier: Mapping[int, Memory] = field(default_factory=dict)  # the version each memory replaced, by its id
    history: Sequence[Passage] = ()  # the person's whole past mail, oldest first, when it may fit (issue 32)
    tools: bool = True  # the model is offered the memory tools (the template names them only then)


def others_on_thread(email: InboundEmail, user_id: str, own_address: str) -> list[str]:
    """Addresses on From/To/Cc/Reply-To other than the user and Quinn: their presence withholds private memories.

    Reply-To counts because the reply goes there (RFC 5322 §3.6.2), not to From: a mail from the user with
    ``Reply-To: someone@elsewhere`` would otherwise send the user's private memories to someone else.
    """
    seen = {a.address for a in (*email.to, *email.cc, *email.reply_to, *((email.from_,) if email.from_ else ()))}
    return sorted(seen - {user_id, own_address})


def visible(memories: Sequence[Memory], private_ok: bool, now: datetime | None = None) -> list[Memory]:
    """Current, unexpired memories, without private ones when others are on the thread."""
    moment = iso(now) if now is not None else None
    return [
        m
        for m in memories
        if m.current
        and (private_ok or not m.private)
        and not (moment is not None and m.expires_at is not None and m.expires_at <= moment)
    ]


def in_domains(memory: Memory, domains: Sequence[str]) -> bool:
    """Within the detected domains: no domains detected, a global memory, no domain, or one of them."""
    return not domains or memory.user_id is None or memory.domain is None or memory.domain in domains


def profile_order(memories: Sequence[Memory]) -> list[Memory]:
    """The profile as it fills the budget: what must never fall out first. Fixed by the operator, then what the
    user explicitly asked to remember, then by importance and use; recency only breaks ties. (Newest first let
    "always answer me in Spanish" fall out of every prompt after months of mail: issue 15.)"""

    def rank(m: Memory) -> tuple[bool, bool, float, int, str]:
        return (m.immutable, m.metadata.get("via") == "remember", m.importance, m.access_count, m.valid_from)

    return sorted(memories, key=rank, reverse=True)


def reply_variables(inputs: ReplyInputs) -> dict[str, Any]:
    """The variables of the reply template (documented in prompts/README.md)."""
    email = inputs.email
    others = others_on_thread(email, inputs.user_id, inputs.assistant_address)
    private_ok = not others
    profile_text = memories_text = conversations_text = ""
    whole = recalled = False
    if inputs.memory_enabled:
        earlier = {mid: m for mid, m in inputs.earlier.items() if private_ok or not m.private}
        profile = profile_order(visible(inputs.profile, private_ok, inputs.now))
        if not private_ok:  # that they asked to forget something is theirs alone (FORGOT_NOTE)
            profile = [_unmarked(m) for m in profile]
        profile_budget = int(inputs.token_budget * PROFILE_SHARE)
        profile_text = context_block([SearchHit(m, 1.0) for m in profile], profile_budget, earlier)
        shown = {m.id for m in profile if f"[memory:{m.id}]" in profile_text}
        relevant = [
            h
            for h in inputs.hits
            if h.memory.type != "persona"
            and in_domains(h.memory, inputs.domains)
            and visible([h.memory], private_ok, inputs.now)
        ]
        hits = [h for h in relevant if h.memory.id not in shown]
        if not private_ok:
            hits = [replace(h, memory=_unmarked(h.memory)) for h in hits]
        remaining = inputs.token_budget - (estimate_tokens(profile_text) if profile_text else 0)
        # Checked again here (the search already applies it): a passage others did not see never reaches them.
        passages = [h for h in inputs.passages if h.passage.seen_by(others)]
        history = [p for p in inputs.history if p.seen_by(others)]
        memories_text, conversations_text, whole = recall_blocks(hits, passages, history, remaining, earlier)
        recalled = bool(relevant or conversations_text)
    persona = "\n".join(m.content for m in inputs.persona if m.current)
    state = "\n".join(f"{key.replace('_', ' ')}: {value}" for key, value in inputs.state.items() if value)
    return {
        "assistant": {"name": inputs.assistant_name, "address": inputs.assistant_address},
        "user": {"address": inputs.user_id, "name": email.from_.name if email.from_ else ""},
        "today": inputs.today,
        "memory_enabled": inputs.memory_enabled,
        "tools": inputs.tools and inputs.memory_enabled,
        "persona": persona,
        "profile": profile_text,
        "memories": memories_text,
        "conversations": conversations_text,
        "conversations_whole": whole,
        "recalled_nothing": inputs.memory_enabled and not recalled,
        "state": state if inputs.memory_enabled and private_ok else "",
        "thread": [{"sender": m.sender, "date": m.date, "body": m.body} for m in inputs.thread],
        "thread_summary": inputs.thread_summary or "",
        "email": email_variables(email, inputs.mail_tokens),
        "others_on_thread": not private_ok,
        "domains": list(inputs.domains),
        "actions": list(inputs.actions),
        "attachments": attachment_variables(inputs),
        "attachments_more": attachments_not_shown(inputs),
    }


UNREAD_UNVERIFIED = "files are read only for mail that may use memory (from a verified sender)"
_FENCE = re.compile(r"={3,}")  # the prompt's file delimiters: a file's text cannot close its block and speak
CUT_NOTE = "(cut here for length: the rest of the file is kept and search_conversations finds it)"


def attachment_variables(inputs: ReplyInputs) -> list[dict[str, Any]]:
    """The email's attachments as template data: name, kind, size, and the text within the budget (each
    section led by its citation, ``[doc:NAME p.3]``), or why the file could not be read. Attachments that were
    not read at all (memory off) are listed by name with the reason. Names and text are the sender's data."""
    listed = inputs.attachments_listed
    if not inputs.documents:
        return [{"name": a.filename, "type": a.content_type, "size": _size(a.size), "text": "", "notes": [],
                 "error": UNREAD_UNVERIFIED} for a in inputs.email.attachments[:listed]]  # fmt: skip
    documents = list(inputs.documents)[:listed]
    readable = [d for d in documents if d.error is None and d.sections]
    share = inputs.document_tokens // max(len(readable), 1)
    files = []
    for document in documents:
        text, notes = "", list(document.notes)
        if document.error is None and document.sections:
            text = document_text(document, share)
            if text.endswith(CUT_NOTE):
                notes.append("only the start of its text is shown")
        files.append({"name": document.name, "type": document.kind if document.kind != "unknown" else
                      document.content_type, "size": _size(document.size), "text": text, "notes": notes,
                      "error": document.error or ""})  # fmt: skip
    return files


def attachments_not_shown(inputs: ReplyInputs) -> int:
    """How many of the email's attachments the prompt does not list (``attachments_listed``, and those the parser
    only counted past its own limit): it says so."""
    total = max(len(inputs.email.attachments), len(inputs.documents))
    listed = total if inputs.attachments_listed is None else min(total, inputs.attachments_listed)
    return total - listed + inputs.email.attachments_left_out


def document_text(document: Extracted, token_budget: int) -> str:
    """The document's sections, each led by its citation, cut at ``token_budget`` tokens with ``CUT_NOTE``."""
    lines: list[str] = []
    used = 0
    for section in document.sections:
        head = f"[doc:{document.name}{' ' + section.ref if section.ref else ''}]"
        block = f"{head}\n{_FENCE.sub('= =', section.text)}"
        cost = estimate_tokens(block)
        if used + cost > token_budget:
            room = (token_budget - used) * 4 - len(head) - 1
            if room > 80:
                lines.append(f"{head}\n{section.text[:room].rstrip()}")
            lines.append(CUT_NOTE)
            break
        lines.append(block)
        used += cost
    return "\n".join(lines)


def _size(size: int) -> str:
    return f"{size} bytes" if size < 1024 else f"{size // 1024} kB"


def recall_blocks(
    hits: Sequence[SearchHit], passages: Sequence[PassageHit], history: Sequence[Passage], budget: int,
    earlier: Mapping[int, Memory] | None = None,
) -> tuple[str, str, bool]:  # fmt: skip
    """(memories, conversations, whole): the person's whole past mail (``history``, oldest first) as the
    conversations when it fits ``budget``, with the memories and the retrieved files in what it leaves (whole is
    True); else the retrieved passages (``share_budget``)."""
    told = "\n".join(f"- {p.line()}" for p in history)
    if told and _tokens(told) <= budget:
        files = [h for h in passages if h.passage.document or h.passage.shared]
        memories, extra = share_budget(hits, files, budget - _tokens(told), earlier)
        return memories, f"{told}\n{extra}" if extra else told, True
    return (*share_budget(hits, passages, budget, earlier), False)


def share_budget(
    hits: Sequence[SearchHit], passages: Sequence[PassageHit], budget: int,
    earlier: Mapping[int, Memory] | None = None,
) -> tuple[str, str]:  # fmt: skip
    """(memories, conversations) blocks within ``budget`` tokens together: each side first gets half, then what
    the other side left unused, so neither starves the other and no share is wasted."""
    half = budget // 2
    memories = context_block(hits, half, earlier)
    conversations = passage_block(passages, budget - _tokens(memories))
    memories = context_block(hits, budget - _tokens(conversations), earlier)
    return memories, conversations


def _tokens(text: str) -> int:
    return estimate_tokens(text) if text else 0


def passage_block(hits: Sequence[PassageHit], token_budget: int) -> str:
    """Passages of past mail as lines citing their date (``[mail:2026-03-14]``), the best that fit
    ``token_budget`` (deduplicated), shown oldest first (``chronological``); who wrote each (the user, or Quinn's
    reply) and its subject are said."""
    lines: list[tuple[str, str]] = []
    seen: set[str] = set()
    used = 0
    for hit in hits:
        passage = hit.passage
        key = " ".join(passage.content.lower().split())
        if key in seen:
            continue
        line = f"- {passage.line()}"
        cost = estimate_tokens(line)
        if used + cost > token_budget:
            continue
        seen.add(key)
        lines.append((passage.sent_at, line))
        used += cost
    return chronological(lines)


def chronological(lines: Sequence[tuple[str, str]]) -> str:
    """``(date, line)`` pairs, chosen best first, as lines oldest first (a stable sort: one date keeps the rank
    order). Issue 32, the 1.5B run of bench/long_memory: with the old and the new value both shown best first, the
    small model answered the one listed first ("Bashir", the manager who had left), though the prompt says the
    newer wins; in time order the current value is the last one read, as in a thread."""
    return "\n".join(line for _, line in sorted(lines, key=lambda pair: pair[0]))


def email_variables(email: InboundEmail, mail_tokens: int | None = None) -> dict[str, Any]:
    """The email as template data; its text cut at ``mail_tokens`` (``cut_text``) when given."""
    text = email.text or email.full_text
    return {
        "sender": str(email.from_) if email.from_ else "",
        "subject": email.subject,
        "date": email.date.isoformat() if email.date else "",
        "text": text if mail_tokens is None else cut_text(text, mail_tokens),
        "to": [str(a) for a in email.to],
        "cc": [str(a) for a in email.cc],
    }


def cut_text(text: str, token_budget: int) -> str:
    """``text`` within ``token_budget`` tokens (``estimate_tokens``): cut at a word near the limit, with a line
    saying how much was left out (issue 30: a 2.9 MB mail must not become a 3 MB prompt)."""
    room = token_budget * 4
    if len(text) <= room:
        return text
    room -= 80  # the note
    cut = text.rfind(" ", room - 200, room)
    kept = text[: cut if cut > 0 else room].rstrip()
    return f"{kept}\n(the email goes on for {len(text) - len(kept)} more characters, not shown here)"


def estimate_tokens(text: str) -> int:
    """A cheap token estimate (about four characters a token) for budgeting, no tokenizer needed."""
    return max(1, math.ceil(len(text) / 4))


def restates(before: str, after: str) -> bool:
    """Whether ``after`` says all that ``before`` said (every word of it): a restatement, not a new value."""
    words = re.compile(r"[^\W_]+")
    return set(words.findall(before.lower())) <= set(words.findall(after.lower()))


def _unmarked(memory: Memory) -> Memory:
    """``memory`` without the mark of a forget (``FORGOT_NOTE``)."""
    if "forgot" not in memory.metadata:
        return memory
    return replace(memory, metadata={k: v for k, v in memory.metadata.items() if k != "forgot"})


def context_block(hits: Sequence[SearchHit], token_budget: int, earlier: Mapping[int, Memory] | None = None) -> str:
    """Memories as lines with ``[memory:ID]`` citations, the best that fit ``token_budget`` (deduplicated), shown
    oldest first by the date they hold from (``chronological``). A
    memory with an ``earlier`` version (by its id) says it after its own text, ``earlier: X (until DATE)``,
    unless the new text only restates it or the budget has room for the current value only."""
    lines: list[tuple[str, str]] = []
    seen: set[str] = set()
    shown: set[int] = set()
    used = 0
    for hit in hits:
        memory = hit.memory
        key = " ".join(memory.content.lower().split())
        if key in seen or memory.id in shown:
            continue
        date = memory.valid_from[:10]
        where = f"{memory.type}, {memory.domain}" if memory.domain else memory.type
        # A fact the extraction was unsure of is not presented as certain (issue 15).
        unsure = ", unsure" if memory.metadata.get("confidence") == "low" else ""
        line = f"- [memory:{memory.id}] ({where}, since {date}{unsure}) {memory.content}"
        if memory.metadata.get("via") == "own_words":  # their sentence, as they wrote it that day
            line = f"- [memory:{memory.id}] (they wrote on {date}) {memory.content}"
        if memory.metadata.get("forgot"):  # what was cut is gone; that something was, the model may say
            line += f" ({FORGOT_NOTE} on {str(memory.metadata['forgot'])[:10]})"
        before = (earlier or {}).get(memory.id)
        if before is not None and not restates(before.content, memory.content):
            with_before = f"{line} | earlier: {before.content} (until {(before.valid_to or date)[:10]})"
            if used + estimate_tokens(with_before) <= token_budget:  # else the current value alone
                line = with_before
        cost = estimate_tokens(line)
        if used + cost > token_budget:
            continue
        seen.add(key)
        shown.add(memory.id)
        lines.append((memory.valid_from, line))
        used += cost
    return chronological(lines)
