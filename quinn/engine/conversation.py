"""Answering one mail and learning from it: the session, the thread, the agent's answer, the outbox, the send.

``Conversation.reply`` is the reply step of the mail state machine (``quinn.engine.mail``); ``ask`` is the same
path for ``quinn ask``, without IMAP or SMTP. Every part comes from ``Parts``, read at the time of use, so a
reload reaches the next mail.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from quinn.agent import (
    NO_LEARNING_TEMPLATES,
    PURGE_DONE_TEMPLATE,
    Answer,
    ExtractionOutcome,
    ThreadMessage,
    kept_reply,
    kept_subject,
    opted_out,
    others_on_thread,
    recallable,
    reply_trace,
)
from quinn.documents import Extracted, take_documents
from quinn.engine.parts import Parts
from quinn.engine.purges import MailboxPurges
from quinn.errors import ConnectError, QuinnError, RetryLater
from quinn.faults import fault_point
from quinn.mailbox import (
    IMAP_FAILURES,
    Decision,
    InboundEmail,
    MailLedger,
    Outbox,
    Reply,
    Sessions,
    canonical_address,
    compose_reply,
    reply_message_id,
    user_for,
)
from quinn.memory import Memory, index_message
from quinn.metrics import Metrics
from quinn.scheduler import JobContext, reply_with_summary, wants_summary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Asked:
    """What ``quinn ask`` did: the answer, the memories its prompt showed the model, and what was learnt."""

    user: str
    answer: Answer
    used: list[Memory]
    learnt: list[Memory]


@dataclass(frozen=True)
class Replied:
    """What ``Conversation.reply`` did: the mail's ledger state, and whether it may be learnt from."""

    state: str
    learnable: bool


def reply_domains(sender: str, recipients: Sequence[str]) -> set[str]:
    """The domains a reply touches, for the domain cap: the sender's and each recipient's."""
    return {address.rpartition("@")[2].lower() for address in (sender, *recipients) if "@" in address}


class Conversation:
    """Replies and learning, on the parts of ``parts`` (``open_memory`` and ``connect_delivery`` done)."""

    def __init__(self, parts: Parts, metrics: Metrics, run_db: Callable[..., Awaitable[Any]],
                 purges: MailboxPurges) -> None:  # fmt: skip
        self.parts = parts
        self.metrics = metrics
        self._db = run_db
        self.purges = purges

    async def reply(self, email: InboundEmail, decision: Decision) -> Replied:
        """Write the reply to the outbox (once), deliver it, and keep it in the conversation. Returns the ledger
        state and whether the mail may be learnt from (not after a purge, an export or their questions)."""
        p = self.parts
        assert p.store is not None and p.delivery is not None and decision.sender is not None
        outbox = Outbox(p.store.db)
        user = decision.user_id or decision.sender  # a stranger's address only names the reply's recipient
        message_id = reply_message_id(email.message_id, p.config.smtp.from_address)
        item = await self._db(outbox.get, message_id)
        # A purge receipt waiting to be sent again: the person is gone, so the mail is not stored again either.
        receipt = item is not None and await self._db(outbox.template_of, message_id) == PURGE_DONE_TEMPLATE
        session_id = None
        documents: list[Extracted] = []
        with self.metrics.stage("thread"):  # the session, the stored message and the thread buffer
            if decision.use_memory and not receipt:
                session_id = await self.join_session(email, decision, user)
            if item is None:
                thread, summary = await self._db(self._thread, email, user, session_id)
        if item is None and session_id is not None:  # files are read and kept for memory mail only
            documents = await self._documents(email, user, session_id)
        if item is None:
            answer = await self._answer(email, decision, user, session_id, thread, summary, documents)
            fault_point("after_llm")
            receipt = answer.purged
            keep = decision.use_memory and not answer.purged  # after a purge, nothing about the user is stored
            reply = self._compose(email, decision, answer)
            kept = self._kept_body(email, user, reply, answer)
            # A reply that names what its mail forgot (the footer of a forget) is not kept once sent.
            # The reply belongs to the authenticated sender even when it carries no memory (a Reply-To naming
            # someone else): their forget and purge must reach its copy. A stranger's belongs to no one.
            owner = user if decision.user_id is not None and not answer.purged else None
            item = await self._db(outbox.put, reply.message_id, email.message_id, owner,
                                  session_id if keep else None, reply.recipients, reply.raw,
                                  template=answer.template, prompt_version=answer.prompt_version,
                                  blank_when_sent=kept != reply.body)  # fmt: skip
            if session_id is not None and keep:
                await self._keep_reply(session_id, user, email, reply, kept, answer)
        template = await self._db(outbox.template_of, message_id)
        with self.metrics.stage("send"):
            state = await p.delivery.deliver(item)
        # The domain cap counts the reply for the sender's domain and each domain it went to (issue 30).
        await self._db(MailLedger(p.store.db).count_outbound, reply_domains(decision.sender, item.recipients))
        if receipt:
            await self._db(self._forget_receipt, item.message_id, email.message_id)
            # Their mail goes from the mailbox too, once this pass has filed it away.
            self.purges.add(user)
        # Nothing of a purged person may be written again (not even to a queue: its bytes would outlive the vacuum).
        return Replied(state, not receipt and template not in NO_LEARNING_TEMPLATES)

    async def take_in(self, email: InboundEmail, decision: Decision) -> str:
        """`quinn import`: the reply's path up to the answer, for a trusted sender's mail of an archive: the
        session (dated by the mail, so an old thread is an old, quiet session), the stored message, its recall
        passages and its files. Nothing is answered. Returns the session id."""
        assert decision.user_id is not None
        session_id = await self.join_session(email, decision, decision.user_id, now=email.date)
        await self._documents(email, decision.user_id, session_id)
        return session_id

    async def take_in_sent(self, email: InboundEmail, decision: Decision) -> str:
        """`quinn import --sent`: a mail the operator's side sent, kept as the outbound side of the recipient's
        conversation (its thread, and recall unless they opted out); never learnt from. Returns the session id."""
        p = self.parts
        assert p.store is not None and decision.user_id is not None
        user = decision.user_id
        sessions = Sessions(p.store.db, p.config.policy.subject_window_days)
        session_id = await self._db(sessions.assign, email, user, email.date, by_subject=True)
        recipients = [a.address for a in (*email.to, *email.cc)]
        await self._db(sessions.store_outbound, session_id, user, email.message_id, email.in_reply_to or "",
                       email.subject, email.sender or "", recipients, email.text, sent_at=email.date)  # fmt: skip
        if await self._recallable(email, user):
            await self._db(index_message, p.store, user, email.message_id, "out")
        return session_id

    async def join_session(self, email: InboundEmail, decision: Decision, user: str, *,
                           now: datetime | None = None) -> str:  # fmt: skip
        """Join the mail to its session and store it there (memory mail only); returns the session id. ``now``:
        the session's time (an imported mail's own date; else the clock's)."""
        p = self.parts
        assert p.store is not None
        sessions = Sessions(p.store.db, p.config.policy.subject_window_days)
        # Joining a thread by its subject alone needs our server's word that the sender is the user.
        session_id = await self._db(sessions.assign, email, user, now, by_subject=decision.authenticated)
        await self._db(sessions.store_inbound, session_id, user, email)
        if await self._recallable(email, user):  # conversation recall: the mail is searchable from now on
            await self._db(index_message, p.store, user, email.message_id, "in")
        return session_id

    async def _documents(self, email: InboundEmail, user: str, session_id: str) -> list[Extracted]:
        """The mail's attachments read, kept for the user and (when the mail joins recall) searchable."""
        p = self.parts
        assert p.store is not None
        # Only the files the prompt may list are read and kept ([budget] attachments_listed): 15,000 tiny files
        # must not cost 15,000 reads (issue 30); the prompt says how many more there were.
        listed = p.config.budget.attachments_listed
        if len(email.attachments) > listed:
            email = dataclasses.replace(email, attachments=email.attachments[:listed])
        with self.metrics.stage("documents"):
            return await take_documents(p.store, p.config.documents, email, user, session_id,
                                        searchable=await self._recallable(email, user))  # fmt: skip

    async def _answer(
        self, email: InboundEmail, decision: Decision, user: str, session_id: str | None,
        thread: list[ThreadMessage], summary: str | None, documents: Sequence[Extracted] = (),
    ) -> Answer:  # fmt: skip
        """The answer to one mail (a summary asked for, or the agent's reply), its token cost recorded."""
        p = self.parts
        assert p.agent is not None and p.store is not None
        answer = None
        if session_id is not None and wants_summary(email.text):  # "summarize this and remember it"
            context = JobContext("summarize", p.store, p.llm, p.prompts, p.config.scheduler, p.clock)
            answer = await reply_with_summary(context, session_id)
        if answer is None:
            with self.metrics.llm_call(p.llm.model_id, "reply"):
                answer = await p.agent.answer(email, user, decision.use_memory, thread=thread, summary=summary,
                                              session_id=session_id, withheld=decision.withheld,
                                              documents=documents, authenticated=decision.trusted)  # fmt: skip
        # Cost is counted per trusted sender even without memory; after a purge the user's name stays out of it.
        counted = decision.user_id if decision.trusted and not answer.purged else None
        await p.agent.record(answer.template, answer.usage, counted, email.message_id)
        # "Why did Quinn say that?" (the console), for memory mail: as the outbox, a user's and nobody else's.
        if answer.trace is not None and decision.use_memory and not answer.purged:
            await self._db(reply_trace.record, p.store.db, user, email.message_id, answer.template,
                           answer.prompt_version, answer.trace)  # fmt: skip
        return answer

    def _compose(self, email: InboundEmail, decision: Decision, answer: Answer) -> Reply:
        """The reply as a mail. What carries memory wholesale, and anything for a stranger, goes to From alone."""
        files = [(a.filename, a.content_type, a.data) for a in answer.attachments]
        c = self.parts.config.smtp
        return compose_reply(email, answer.body, own_address=c.from_address, own_name=c.from_name,
                             reply_all=c.reply_all, attachments=files,
                             sender_only=answer.private or not decision.trusted,
                             max_recipients=self.parts.config.policy.max_recipients_per_reply)  # fmt: skip

    @staticmethod
    def _kept_body(email: InboundEmail, user: str, reply: Reply, answer: Answer) -> str:
        """The reply's text as Quinn keeps it: without what its mail asked to forget (``kept_reply``)."""
        return kept_reply(reply.body, answer.changes, email.text, user, email.sender_name)

    async def _keep_reply(self, session_id: str, user: str, email: InboundEmail, reply: Reply, body: str,
                          answer: Answer) -> None:  # fmt: skip
        """Store Quinn's reply (``body``: ``_kept_body``) in the conversation, so the thread's next mail sees it;
        the model's answer (not a command's) joins conversation recall."""
        p = self.parts
        assert p.store is not None
        sessions = Sessions(p.store.db)
        subject = kept_subject(reply.subject, answer.changes, email.text, user, email.sender_name)  # as the body
        await self._db(sessions.store_outbound, session_id, user, reply.message_id, email.message_id,
                       subject, p.config.smtp.from_address, reply.recipients, body)  # fmt: skip
        await self._db(sessions.link, session_id, reply.message_id)
        if answer.template == "reply" and await self._recallable(email, user):
            await self._db(index_message, p.store, user, reply.message_id, "out")

    async def ask(self, email: InboundEmail, on_reply: Callable[[Answer, list[Memory]], object] | None = None) -> Asked:
        """``quinn ask``: one message from the operator's terminal, answered on the daemon's path for a trusted
        user (session, memory, the reply template and tools, extraction), without IMAP or SMTP: nothing is sent.

        The From address is the user: the terminal is the operator's, so it is trusted by construction.
        ``on_reply(answer, memories used)`` runs once the reply exists, before the extraction that may take
        minutes on a small local model (issue 34). When no reply comes (the model is down), the message is taken
        back out of its session, as if never asked: a retry starts clean.
        """
        p = self.parts
        assert p.agent is not None and p.store is not None and email.from_ is not None
        r = p.rules
        user = user_for(canonical_address(email.from_.address), r.aliases, r.plus_addressing)  # as decide() does
        decision = Decision("handle", "asked from the terminal", user_id=user, authenticated=True, use_memory=True,
                            sender=user, rate_key=user)  # fmt: skip
        session_id = await self.join_session(email, decision, user)
        try:
            thread, summary = await self._db(self._thread, email, user, session_id)
            documents = await self._documents(email, user, session_id)
            answer = await self._answer(email, decision, user, session_id, thread, summary, documents)
        except BaseException:
            await self._db(Sessions(p.store.db).withdraw, session_id, email.message_id)
            raise
        if not answer.purged:
            reply = self._compose(email, decision, answer)
            await self._keep_reply(session_id, user, email, reply, self._kept_body(email, user, reply, answer), answer)
        used = await self._db(self._memories, user, answer.shown)
        if on_reply is not None:
            on_reply(answer, used)
        outcome = None if answer.purged else await self.learn(user, email, template=answer.template)
        learnt = [*outcome.created, *outcome.updated] if outcome is not None else []
        return Asked(user, answer, used, await self._db(self._memories, user, learnt))

    def _memories(self, user: str, ids: Sequence[int]) -> list[Memory]:
        """The user's memories of ``ids``, in that order (runs on the DB thread)."""
        store = self.parts.store
        assert store is not None
        found = (store.get(i, user_id=user) for i in dict.fromkeys(ids))
        return [m for m in found if m is not None]

    def _forget_receipt(self, receipt_id: str, confirmation_id: str) -> None:
        """Once the purge receipt is delivered, it and the confirming mail's ledger row were the last traces of
        the person: drop them, and vacuum so they leave the file's bytes too (runs on the DB thread)."""
        db = self.parts.db
        assert db is not None
        Outbox(db).forget_delivered(receipt_id)
        MailLedger(db).unlink(confirmation_id)
        if not db.vacuum():
            log.warning("after a purge receipt: a reader of the database file kept the deleted rows' bytes in it; "
                        "run `quinn database vacuum` once it is done")  # fmt: skip

    def _thread(self, email: InboundEmail, user: str, session_id: str | None) -> tuple[list[ThreadMessage], str | None]:
        """The thread buffer and rolling summary of the mail's session (runs on the DB thread).

        With others on this mail, the thread text obeys the rule of private memories: only the messages every one
        of them already saw, and no summary (it may fold in what the user said to Quinn alone)."""
        p = self.parts
        assert p.store is not None
        if session_id is None:
            return [], None
        sessions = Sessions(p.store.db)
        others = set(others_on_thread(email, user, p.config.smtp.from_address))
        thread = [  # after a milestone summary: only the messages it does not cover
            ThreadMessage(m.from_addr, m.sent_at, m.body, m.message_id)
            for m in sessions.recent(session_id, limit=12)
            if m.message_id != email.message_id and others <= m.participants
        ]
        return thread, None if others else sessions.summary(session_id)

    async def _recallable(self, email: InboundEmail, user: str) -> bool:
        """Whether the mail joins conversation recall: not a memory command or confirmation (`recallable`), and
        not from someone who asked not to be remembered (their mail is kept for threading, never indexed)."""
        store = self.parts.store
        assert store is not None
        return recallable(email) and not await self._db(opted_out, store.db, user)

    async def learn(self, user: str, email: InboundEmail, *, template: str | None = None,
                    transient: bool = False) -> ExtractionOutcome | None:  # fmt: skip
        """Extract memories from the mail; a failure here never affects the reply already sent. ``template``: the
        reply's, when known (else read from the outbox). ``transient``: a failure that passes (``RetryLater``,
        ``ConnectError``) is raised for the caller to try again later, instead of logged."""
        p = self.parts
        assert p.agent is not None and p.store is not None
        if template is None:
            reply_id = reply_message_id(email.message_id, p.config.smtp.from_address)
            template = await self._db(Outbox(p.store.db).template_of, reply_id)
        if template in NO_LEARNING_TEMPLATES:  # a purge question or its answer: nothing may be learnt from it
            log.info("mail %s: no extraction after %s", email.message_id, template)
            return None
        try:
            with self.metrics.llm_call(p.llm.background_model_id, "extract"):
                return await p.agent.learn(user, email)
        except (RetryLater, ConnectError) as exc:
            if transient:
                raise
            log.warning("memory extraction for %s failed for good: %s", email.message_id, exc)
        except QuinnError as exc:
            log.warning("memory extraction for %s failed: %s", email.message_id, exc)
        except IMAP_FAILURES:
            raise
        except Exception:  # a bug: the reply is out and the mail filed; the daemon goes on
            log.exception("memory extraction for %s failed", email.message_id)
        return None
