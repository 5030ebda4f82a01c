"""Job 1, milestone summarization: long threads fold their older messages into a rolling summary.

A session whose messages not yet summarized exceed ``summarize_threshold_tokens`` gets them folded, oldest
first and in batches, into ``sessions.summary``; ``sessions.summarized_upto`` (a message id) records how far.
The newest ``summarize_keep_recent`` messages stay verbatim, and the reply context from then on is the summary
plus the messages after it (``Sessions.recent``). Each batch is saved on its own, so a run killed half way
resumes at the next batch. The summary is also kept as a ``summary`` memory of the user (episodic, tagged with
the session), reconciled at the end of every run, so a crash between the two writes heals itself.

On demand: a user who writes "summarize this and remember it" gets the whole thread folded now, the summary in
the reply, and the memory stored (``summarize_on_request``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from quinn.agent import Answer, Usage, estimate_tokens, forgets_in, forgetting, opted_out, opted_out_among
from quinn.db import Database
from quinn.errors import RetryLater
from quinn.mailbox import Sessions
from quinn.memory import CURRENT, MemoryStore
from quinn.scheduler.context import JobContext

log = logging.getLogger(__name__)

_ASK = re.compile(
    r"\b(summari[sz]e|sum up|recap)\b.{0,80}\b(remember|save|store|keep)\b"
    r"|\b(remember|save|store|keep)\b.{0,40}\b(summary|summari[sz]e|recap)\b",
    re.IGNORECASE | re.DOTALL,
)


def wants_summary(text: str) -> bool:
    """True for mail asking to summarize the thread and remember it ("Please summarize this and remember it")."""
    return bool(_ASK.search(" ".join(text.split())[:600]))


@dataclass(frozen=True)
class Message:
    """One message of a session as the summarizer sees it."""

    id: int
    sender: str
    date: str
    body: str

    @property
    def tokens(self) -> int:
        """The estimated token cost of this message in a prompt."""
        return estimate_tokens(f"--- {self.sender} on {self.date} ---\n{self.body}")


@dataclass(frozen=True)
class SessionText:
    """A session's summary so far and the messages after it."""

    session_id: str
    user_id: str
    subject: str
    summary: str | None
    summarized_upto: int
    messages: list[Message]


@dataclass(frozen=True)
class Folded:
    """The outcome of folding messages into a session's summary."""

    summary: str | None
    summarized_upto: int
    folded: int
    usage: Usage | None
    prompt_version: str | None


def session_text(db: Database, session_id: str) -> SessionText | None:
    """The session's summary and its messages after ``summarized_upto``, oldest first."""
    found = Sessions(db).unsummarized(session_id)
    if found is None:
        return None
    messages = [Message(*row) for row in found.messages]
    return SessionText(session_id, found.user_id, found.subject, found.summary, found.summarized_upto, messages)


def plan_fold(messages: list[Message], threshold_tokens: int, keep_recent: int) -> list[Message]:
    """The oldest messages to fold: all but the newest ones that fit in half the threshold (at most
    ``keep_recent`` of them, at least one), and nothing while the whole is under the threshold."""
    if sum(m.tokens for m in messages) <= threshold_tokens:
        return []
    kept = 0
    kept_tokens = 0
    for message in reversed(messages):
        if kept >= keep_recent or (kept and kept_tokens + message.tokens > threshold_tokens // 2):
            break
        kept += 1
        kept_tokens += message.tokens
    return messages[: len(messages) - kept]


def batches(messages: list[Message], max_tokens: int) -> list[list[Message]]:
    """Consecutive runs of messages of at most ``max_tokens`` each (one message at least)."""
    out: list[list[Message]] = []
    current: list[Message] = []
    used = 0
    for message in messages:
        if current and used + message.tokens > max_tokens:
            out.append(current)
            current, used = [], 0
        current.append(message)
        used += message.tokens
    if current:
        out.append(current)
    return out


async def fold_session(ctx: JobContext, session_id: str, *, everything: bool = False) -> Folded:
    """Fold the session's older messages (all of them with ``everything``) into its summary, batch by batch."""
    settings = ctx.settings
    text = await ctx.db(session_text, ctx.store.db, session_id)
    if text is None:
        return Folded(None, 0, 0, None, None)
    fold = text.messages if everything else plan_fold(text.messages, settings.summarize_threshold_tokens,
                                                       settings.summarize_keep_recent)  # fmt: skip
    summary, upto, folded = text.summary, text.summarized_upto, 0
    usage: Usage | None = None
    version: str | None = None
    max_chars = settings.summarize_threshold_tokens * 4
    # What the person asked in this thread to forget: the summary written after the forget must not hold it.
    own = await ctx.db(Sessions(ctx.store.db).own_words, session_id, text.user_id) if fold else []
    forgets = forgets_in(own, text.user_id)
    for batch in batches(fold, settings.summarize_threshold_tokens):
        rendered = ctx.prompts.render("summarize", {
            "user": {"address": text.user_id},
            "subject": text.subject,
            "previous_summary": summary or "",
            "messages": [{"sender": m.sender, "date": m.date, "body": _cut(m.body, max_chars)} for m in batch],
            "target_words": max(80, settings.summarize_threshold_tokens // 8),
        })  # fmt: skip
        result = await ctx.model().text(rendered.system, rendered.user, background=True, purpose="summarize")
        usage = result.usage if usage is None else usage + result.usage
        version = rendered.version
        new_upto = batch[-1].id
        if not await ctx.db(read_as_before, ctx.store.db, session_id, batch, summary):
            log.info("session %s: its text changed while it was summarized (a forget?); the next run continues",
                     session_id)  # fmt: skip
            break
        written = forgetting.without_all(result.text, forgets) or forgetting.FORGOTTEN_SUMMARY
        if not await ctx.db(Sessions(ctx.store.db).save_summary, session_id, written, upto, new_upto):
            log.info("session %s moved on while it was summarized; the next run continues", session_id)
            break
        summary, upto, folded = written, new_upto, folded + len(batch)
    return Folded(summary, upto, folded, usage, version)


def read_as_before(db: Database, session_id: str, messages: Sequence[Message], summary: str | None) -> bool:
    """Whether the session's summary and the bodies of ``messages`` still read as the model was shown them: a
    forget answered meanwhile rewrites both (``forgetting.reach``), and what the model wrote from the old words
    would bring the fact back."""
    now = session_text(db, session_id)
    if now is None or now.summary != summary:
        return False
    bodies = {m.id: m.body for m in now.messages}
    return all(bodies.get(m.id) == m.body for m in messages)


def summary_content(subject: str, summary: str) -> str:
    """The text of a thread's summary memory."""
    if subject:
        return f'Summary of the email thread "{subject}": {summary}'
    return f"Summary of an email thread: {summary}"


def sync_summary_memories(store: MemoryStore, session_id: str | None = None) -> tuple[int, int, int | None]:
    """Bring each session's ``summary`` memory up to its session summary: (created, updated, last memory id).

    A summary memory the user forgot (inactive, not superseded) is not brought back, and nothing is written for a
    person who asked not to be remembered (agent/consent.py): their summary memory stays as it was.
    """
    where = "AND s.id = ?" if session_id else ""
    rows = store.db.query(
        "SELECT s.id, s.user_id, s.subject, s.summary, s.summarized_upto FROM sessions s"
        " WHERE s.summary IS NOT NULL AND s.merged_into IS NULL AND NOT EXISTS (SELECT 1 FROM memories m"
        "  WHERE m.user_id = s.user_id AND m.type = 'summary' AND json_extract(m.metadata, '$.session_id') = s.id"
        f"  AND json_extract(m.metadata, '$.summarized_upto') = s.summarized_upto) {where} ORDER BY s.id",
        (session_id,) if session_id else (),
    )
    created = updated = 0
    last: int | None = None
    stopped = opted_out_among(store.db, sorted({str(r[1]) for r in rows}))
    for sid, user_id, subject, summary, upto in rows:
        if user_id in stopped:
            continue
        latest = store.db.query_one(
            "SELECT id, active, superseded_by FROM memories WHERE user_id = ? AND type = 'summary'"
            " AND json_extract(metadata, '$.session_id') = ? ORDER BY id DESC LIMIT 1",
            (user_id, sid),
        )
        content = summary_content(subject, summary)
        metadata = {"session_id": sid, "summarized_upto": int(upto), "subject": subject}
        if latest is None:
            last = store.add(user_id, content, scope="episodic", type="summary", tags=[f"session:{sid}"],
                             metadata=metadata, importance=0.5)  # fmt: skip
            created += 1
        elif latest[1] and latest[2] is None:
            last = store.update(int(latest[0]), content, user_id=user_id, metadata=metadata,
                                reason="thread summary moved on")  # fmt: skip
            updated += 1
        else:
            log.info("session %s: its summary memory was forgotten; not bringing it back", sid)
    return created, updated, last


async def summarize_job(ctx: JobContext) -> None:
    """Summarize every thread over the threshold, then bring the summary memories up to date."""
    # A cheap length test (4 characters a token); fold_session's plan is the exact one.
    sessions = Sessions(ctx.store.db)
    over = await ctx.db(sessions.over_length, ctx.settings.summarize_threshold_tokens * 4)
    for session_id in over:
        # "Stop remembering me" (agent/consent.py): their threads are not folded into a new summary.
        owner = await ctx.db(sessions.user_of, session_id)
        if owner is not None and await ctx.db(opted_out, ctx.store.db, owner):
            ctx.counts.skipped += 1
            continue
        try:
            outcome = await fold_session(ctx, session_id)
        except RetryLater as exc:  # the batches before it are saved; the rest waits for the next run
            ctx.item_failed(f"session {session_id}", exc)
            continue
        ctx.item_done()
        if outcome.usage is not None:
            user = await ctx.db(Sessions(ctx.store.db).user_of, session_id)
            await ctx.record_usage(outcome.usage, user)
        if outcome.folded:
            ctx.counts.processed += 1
            ctx.counts.details["messages_folded"] = ctx.counts.details.get("messages_folded", 0) + outcome.folded
            log.info("session %s: %d messages folded into its summary", session_id, outcome.folded)
    created, updated, _last = await ctx.db(sync_summary_memories, ctx.store)
    ctx.counts.created += created
    ctx.counts.updated += updated


@dataclass(frozen=True)
class RequestedSummary:
    """A summary made because the user asked for it: its text, the memory holding it, and its cost."""

    summary: str
    memory_id: int | None
    usage: Usage | None
    prompt_version: str


async def summarize_on_request(ctx: JobContext, session_id: str) -> RequestedSummary | None:
    """Fold the whole thread now and store its summary memory; None when there was nothing to summarize, or the
    person asked not to be remembered (then the agent answers the mail, and stores nothing)."""
    user = await ctx.db(Sessions(ctx.store.db).user_of, session_id)
    if user is None or await ctx.db(opted_out, ctx.store.db, user):
        return None
    outcome = await fold_session(ctx, session_id, everything=True)
    if outcome.summary is None:
        return None
    await ctx.db(sync_summary_memories, ctx.store, session_id)
    memory_id = await ctx.db(
        ctx.store.db.query_value,
        "SELECT id FROM memories WHERE type = 'summary' AND json_extract(metadata, '$.session_id') = ?"
        f" AND {CURRENT} ORDER BY id DESC LIMIT 1",
        (session_id,),
    )
    return RequestedSummary(outcome.summary, memory_id, outcome.usage, outcome.prompt_version or "")


def _cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + " [...]"


async def reply_with_summary(ctx: JobContext, session_id: str) -> Answer | None:
    """The reply to "summarize this and remember it": the thread's summary, stored as a memory and cited, sent to
    the user alone."""
    done = await summarize_on_request(ctx, session_id)
    if done is None:
        return None
    saved = f"\n\nI saved this summary to your memory [memory:{done.memory_id}]." if done.memory_id else ""
    usage = done.usage or Usage(ctx.model().background_model_id)
    # The whole thread, what the user told Quinn alone included: to From only, as every answer that carries the
    # user's memory wholesale (a Cc'd person may have seen none of it).
    return Answer(f"{done.summary}{saved}", "summarize", done.prompt_version, usage, private=True)
