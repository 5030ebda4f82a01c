"""One mail along the state machine of ``quinn.engine.states``: ledger → size → fetch → parse → policy →
rate caps → hold → reply (``quinn.engine.conversation``) → file away → learn.

Every step is idempotent on (folder, UIDVALIDITY, UID), so after a crash the daemon resumes where the ledger says
the mail was. Every move goes through ``_move`` (checked against the state machine, recorded with its reason);
time comes from the parts' clock. What goes wrong is told apart by type: a transient failure (``RetryLater``)
defers with backoff, a permanent SMTP rejection (``ConnectError``) fails the mail, a setup error
(``ConfigError``: a revoked key, a refused login) holds every mail until it is fixed, an IMAP failure goes up to
the run loop (which reconnects) and never marks the mail.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from quinn.agent import learning, opted_out
from quinn.clock import iso
from quinn.confined import ChildFailed, ChildLimits, run_confined
from quinn.engine import states
from quinn.engine.conversation import Conversation, reply_domains
from quinn.engine.flight import Flight
from quinn.engine.parts import Parts
from quinn.errors import ConfigError, ConnectError, RetryLater
from quinn.faults import fault_point
from quinn.hold import SetupHold
from quinn.mailbox import (
    HANDED_ON_STATES,
    IMAP_FAILURES,
    POISON_STRIKES,
    UNVERIFIED_PREFIX,
    Decision,
    Fetched,
    ImapLoginRejected,
    InboundEmail,
    MailKey,
    MailLedger,
    MailRecord,
    Outbox,
    Rules,
    carries_text_of,
    decide,
    decide_sent,
    parse_or_reason,
    reply_addresses,
    thread_key,
)
from quinn.metrics import Metrics
from quinn.scheduler import default_holder, holder_is_dead

log = logging.getLogger(__name__)

R = TypeVar("R")

# An IMAP failure, or a login the server refused: the run loop's to handle (reconnect or hold), not a mail's.
IMAP_OR_LOGIN: tuple[type[BaseException], ...] = (*IMAP_FAILURES, ImapLoginRejected)
LLM_RETRY_BASE = timedelta(minutes=1)
LLM_RETRY_MAX = timedelta(hours=1)
MAX_ATTEMPTS = 12
#: The reason an imported mail that may not use memory is left with (`quinn import` counts them by it).
NOT_TRUSTED_PREFIX = "not imported: "
VOUCH_HINT = "if you know the sender wrote it, run the import again with --vouch ADDRESS (or --vouch DOMAIN)"
PARSE_MEMORY_BYTES = 1024 * 1024 * 1024  # address space of a parsing child: far above any mail within max_message_kb


class _Struck(Exception):
    """The try at reading a mail was stopped (its parse killed at the deadline): it stays counted as a strike."""


@dataclass(frozen=True)
class Ready:
    """A mail that passed the policy and is to be answered, with the keys that order it: its thread (root
    Message-ID, in a bucket of its own when nobody vouched for the sender) and its sender's rate bucket."""

    mail: InHand
    email: InboundEmail
    decision: Decision
    thread: str
    sender: str
    raw: bytes  # as fetched: queued for learning (quinn.agent.learning)
    internal_date: datetime | None


@dataclass
class InHand:
    """The mail being handled: where it is and the state the ledger has for it."""

    key: MailKey
    state: str


def poison_reason(record: MailRecord, timeout_s: float) -> str:
    """The ledger's reason for a mail quarantined as poison."""
    last = f"; last: {record.reason}" if record.state == "deferred" and record.reason else ""
    return (f"poison: {record.strikes} tries at reading it never ended (the daemon was killed meanwhile, or "
            f"parsing passed {timeout_s:g} s){last}")  # fmt: skip


class MailHandler:
    """Takes mails along the state machine; ``release_held`` is set when held mail may be tried again.

    ``replying=False`` is `quinn import` (quinn/engine/importing.py): the same path for mail of an archive, minus
    the reply. The mail is read from its source, not fetched from the watched folder (``prepare_key``); it need
    not be addressed to Quinn (``decide(imported=True)``) and may be trusted by the operator's word
    (``Rules.vouched``); a trusted sender's mail is taken in (session, stored, recall passages, files) and queued
    for learning, and ends ``imported``; nothing is sent, no rate cap counts it, and nothing is filed away (the
    source is never changed). Mail that may not use memory stays ``received`` with the reason: a rerun that
    vouches for its sender takes it in."""

    def __init__(self, parts: Parts, conversation: Conversation, hold: SetupHold, metrics: Metrics,
                 run_db: Callable[..., Awaitable[Any]], run_imap: Callable[..., Awaitable[Any]], *,
                 replying: bool = True, rules: Rules | None = None, sent: bool = False) -> None:  # fmt: skip
        self.replying = replying
        self.sent = sent  # `quinn import --sent`: a Sent folder, kept as the outbound side (decide_sent)
        self._rules = rules  # the import's rules (vouched senders); None: the parts' own, read at each mail
        self.parts = parts
        self.conversation = conversation
        self.hold = hold
        self.metrics = metrics
        self._db = run_db
        self._imap = run_imap
        self.handled = 0
        self.in_hand: set[int] = set()  # the UIDs being handled, learning included
        self.release_held = True  # at start: the operator may have fixed the setup while Quinn was down
        self.holder = default_holder()  # this daemon's name on the leases of the mails it handles

    def _ledger(self) -> MailLedger:
        assert self.parts.store is not None
        return MailLedger(self.parts.store.db)

    def key(self, uid: int) -> MailKey:
        """The ledger key of ``uid`` in the watched folder under its current UIDVALIDITY."""
        return MailKey(self.parts.config.imap.folder, self.parts.mailbox.uidvalidity, uid)

    async def take(self, uid: int, size: int, flight: Flight) -> None:
        """Prepare one mail here, in UID order (no model call), and put it in flight to be answered, ordered by its
        thread and its sender; the "mail" stage times it from the first step to the last."""
        timer = ExitStack()
        timer.enter_context(self.metrics.stage("mail"))
        self.in_hand.add(uid)

        def done() -> None:
            timer.close()
            self.in_hand.discard(uid)

        try:
            ready = await self._guarded(uid, self.prepare(uid, size))
        except BaseException:
            done()
            raise
        if ready is None:
            await self._release(uid)
            done()
            return

        async def answer() -> None:
            try:
                await self._guarded(uid, self.answer(ready))
                await self._release(uid)
            finally:
                done()

        flight.start((f"thread:{ready.thread}", f"sender:{ready.sender}"), answer)

    async def _guarded(self, uid: int | MailKey, step: Awaitable[R]) -> R | None:
        """Run one step of a mail: an IMAP failure goes up (the run loop reconnects); anything else unforeseen
        (a bug) defers this mail with backoff, and the others go on."""
        try:
            return await step
        except IMAP_OR_LOGIN:
            raise
        except Exception as exc:
            log.exception("mail uid=%s: unexpected %s", getattr(uid, "uid", uid), exc.__class__.__name__)
            await self.retry_later(uid, f"unexpected {exc.__class__.__name__}: {exc}")
            return None

    async def handle(self, uid: int, size: int) -> None:
        """Take one message as far as it can go now. Never raises for a problem with the mail itself."""
        ready = await self.prepare(uid, size)
        if ready is not None:
            await self.answer(ready)
        await self._release(uid)

    async def handle_key(self, key: MailKey, size: int, fetch: Callable[[], Awaitable[Fetched | None]]) -> None:
        """``handle`` for a mail read by ``fetch`` (`quinn import`'s source): a bug defers it with backoff."""
        ready = await self._guarded(key, self.prepare_key(key, size, fetch))
        if ready is not None:
            await self._guarded(key, self.answer(ready))
        await self._release(key)

    async def _release(self, uid: int | MailKey) -> None:
        """Give back the lease on a mail this daemon is done with for now (finished, deferred, held, skipped, or
        failed by a bug): another daemon may take it up when it is due. Without a database (a failure of its own,
        on the way up) the lease simply runs out."""
        key = uid if isinstance(uid, MailKey) else self.key(uid)
        try:
            await self._db(self._ledger().release_lease, key, self.holder)
        except Exception as exc:
            log.warning("mail uid=%s: lease not released (%s: %s); it runs out after [service] mail_lease_s", key.uid,
                        exc.__class__.__name__, exc)  # fmt: skip

    async def _claim(self, key: MailKey) -> MailRecord | None:
        """Take (or renew) this daemon's lease on a mail: its record as it is now, or None when another daemon
        is handling it (the mail is skipped this pass)."""
        p = self.parts
        ledger, lease_s = self._ledger(), p.config.service.mail_lease_s
        record = await self._db(ledger.claim, key, self.holder, p.clock.now(), lease_s)
        if record is None:
            other, until = await self._db(ledger.lease_of, key)
            if other is not None and holder_is_dead(other):  # this daemon before a restart: no need to wait
                log.info("mail uid=%s: its lease holder %s is dead on this host; taking the mail over", key.uid,
                         other)  # fmt: skip
                record = await self._db(ledger.claim, key, self.holder, p.clock.now(), lease_s, dead=other)
            if record is None:
                log.debug("mail uid=%s: handled by another daemon (%s, until %s); skipped", key.uid, other, until)
        return record

    async def prepare(self, uid: int, size: int) -> Ready | None:
        """Everything before the answer (no model call): ledger, size, fetch, parse, duplicates, policy. Returns
        the mail to answer, or None when it is finished, filed, or not due."""
        return await self.prepare_key(self.key(uid), size, lambda: self._imap(self.parts.mailbox.fetch, uid))

    async def prepare_key(
        self, key: MailKey, size: int, fetch: Callable[[], Awaitable[Fetched | None]]
    ) -> Ready | None:
        """``prepare`` for the mail of ``key``, read by ``fetch`` (the watched folder's, or an import source's)."""
        p = self.parts
        ledger = self._ledger()
        uid = key.uid
        record = await self._db(ledger.receive, key)
        if (record.final and record.moved) or record.state in HANDED_ON_STATES or not record.due(p.clock.now()):
            return None  # done with, its mail lives on under another key, or it is not due yet
        # The lease, before the mail is read: with several daemons on one mailbox and database, the one that
        # holds it handles the mail and the others skip it. The record is read again once claimed: another
        # daemon may have finished or deferred the mail since the line above.
        claimed = await self._claim(key)
        if claimed is None:
            return None
        record = claimed
        mail = InHand(key, record.state)
        if record.final:
            if not record.moved:  # a crash between "done" and "filed away"
                await self._file_away(key, record.state, record.reason)
            return None
        if record.state in HANDED_ON_STATES or not record.due(p.clock.now()):
            return None
        if record.strikes >= POISON_STRIKES:
            await self._finish(mail, "quarantined", poison_reason(record, p.config.imap.parse_timeout_s))
            return None
        limit_kb = p.config.imap.max_message_kb
        if size > limit_kb * 1024:
            await self._finish(mail, "quarantined", f"too large: {size} bytes > {limit_kb} KiB")
            return None
        # Everything up to the trust decision reads the sender's bytes: a try at it counts as a strike until it
        # ends, so a mail the daemon was killed over (or whose parse was killed) is not read forever (issue 30).
        await self._db(ledger.strike, key)
        struck = False
        try:
            return await self._read(mail, uid, fetch)
        except _Struck:
            struck = True
            return None
        finally:
            if not struck:
                await self._end_try(key)

    async def _end_try(self, key: MailKey) -> None:
        """The try at reading a mail ended: its strikes are cleared. Without a database the strike stays."""
        try:
            await self._db(self._ledger().clear_strikes, key)
        except Exception as exc:
            log.warning("mail uid=%s: strike not cleared (%s: %s)", key.uid, exc.__class__.__name__, exc)

    async def parse(self, raw: bytes, internal_date: datetime | None, *, sized: bool = True) -> InboundEmail | str:
        """The mail parsed in a child process, within ``[imap] parse_timeout_s`` and a memory cap
        (quinn/confined.py, forked from the fork server), so a mail that is slow to parse never stalls the loop; a
        string says why it cannot be parsed (``sized``: also when it is over ``max_message_kb``). Raises
        ``ChildFailed`` when the child was killed at the deadline or died."""
        c = self.parts.config.imap
        # The parser has no deadline of its own: parse_timeout_s is the whole of it. The answer holds the
        # attachments' bytes, so it may be a few times the mail's size.
        limits = ChildLimits(timeout_s=c.parse_timeout_s, memory_bytes=PARSE_MEMORY_BYTES,
                             result_bytes=max(64 * 2**20, 4 * len(raw)))  # fmt: skip
        args = (raw, internal_date, c.max_message_kb * 1024 if sized else None)
        result: InboundEmail | str = await asyncio.to_thread(run_confined, parse_or_reason, args, limits, "forkserver")
        return result

    async def _read(self, mail: InHand, uid: int, fetch: Callable[[], Awaitable[Fetched | None]]) -> Ready | None:
        """Fetch, parse, duplicates, policy: the steps of ``prepare`` that read the sender's bytes."""
        p = self.parts
        ledger = self._ledger()
        key = mail.key
        with self.metrics.stage("fetch"):
            fetched = await fetch()
        if fetched is None:  # expunged since the pass began (by a person, or our own copy filed at once)
            await self._move(mail, "ignored", "gone from the folder before it was read")
            await self._db(ledger.mark_moved, key)
            return None
        fault_point("after_fetch")
        try:
            with self.metrics.stage("parse"):
                parsed = await self.parse(fetched.raw, fetched.internal_date)
        except ChildFailed as stopped:
            timeout_s = p.config.imap.parse_timeout_s
            why = (f"parsing took longer than [imap] parse_timeout_s = {timeout_s:g} s" if stopped.kind == "timeout"
                   else f"the parser {stopped.message}")  # fmt: skip
            await self._defer(mail, why, p.clock.now(), count_attempt=False)
            log.warning("mail uid=%s: %s; tried again at the next pass, quarantined after %d such tries", uid, why,
                        POISON_STRIKES)  # fmt: skip
            raise _Struck from stopped
        if isinstance(parsed, str):
            await self._finish(mail, "quarantined", f"unparseable: {parsed}")
            return None
        email = parsed
        if await self._is_own_copy(mail, email):
            return None
        earlier = await self._db(ledger.elsewhere, email.message_id, key)
        if earlier is not None and earlier.final:
            # The same mail twice (a second copy, or seen again after a UIDVALIDITY change): answered once.
            reason = f"duplicate of uid {earlier.key.uid}: {earlier.state}"
            await self._finish(mail, "ignored", reason, message_id=email.message_id)
            return None
        if earlier is not None and earlier.state in HANDED_ON_STATES:
            # Seen before under another key: a UIDVALIDITY change, or the operator's `mail status --retry`
            # moved it back from quarantine (a MOVE gives it a new UID, RFC 6851 §3.3).
            record = await self._db(ledger.carry_over, earlier, key)
            mail.state = record.state
            log.info("mail uid=%s id=%s: carried on from %s/%s (%s)", uid, email.message_id,
                     earlier.key.uidvalidity, earlier.key.uid, earlier.state)  # fmt: skip
            if not record.due(p.clock.now()):
                return None
        elif earlier is not None and not earlier.reason.startswith(NOT_TRUSTED_PREFIX):
            return None  # another live copy of this mail is in progress; this one waits for its outcome
        # (An imported copy left untrusted waits for the operator's --vouch, not for this copy: a forger's copy
        # dated earlier must not hold back the genuine one.)
        rules = self._rules or p.rules
        decision = decide_sent(email, rules) if self.sent else decide(email, rules, imported=not self.replying)
        log.info("mail uid=%s id=%s from=%s: %s (%s)", uid, email.message_id, email.sender, decision.action,
                 decision.reason)  # fmt: skip
        if decision.action != "handle":
            await self._finish(mail, "ignored" if decision.action == "ignore" else "rejected", decision.reason,
                               message_id=email.message_id, user_id=decision.user_id)  # fmt: skip
            return None
        assert decision.rate_key is not None
        # Mail nobody vouched for is counted in buckets of its own: forged mail never spends a user's caps.
        thread = thread_key(email) if decision.trusted else UNVERIFIED_PREFIX + thread_key(email)
        return Ready(mail, email, decision, thread, decision.rate_key, fetched.raw, fetched.internal_date)

    async def answer(self, ready: Ready) -> None:
        """The mail is to be answered: rate caps, the setup hold, the reply, then learning. Mails sharing a
        thread or a sender go through here one after another (``quinn.engine.flight``)."""
        if not self.replying:
            await self.take_in(ready)
            return
        p = self.parts
        mail, email, decision, thread = ready.mail, ready.email, ready.decision, ready.thread
        assert decision.rate_key is not None
        # The mail may have waited behind others of its thread or sender longer than the lease: renewed here;
        # when another daemon took it over meanwhile (or already moved it on), it is that daemon's.
        now = await self._claim(mail.key)
        if now is None or now.state != mail.state:
            if now is not None:
                log.info("mail uid=%s: %s by another daemon meanwhile; left alone", mail.key.uid, now.state)
            return
        ids = {"message_id": email.message_id, "user_id": decision.user_id, "thread_key": thread,
               "sender_key": decision.rate_key}  # fmt: skip
        c = p.config.policy
        capped = await self._db(self._ledger().cap_reached, decision.rate_key, thread,
                                c.max_replies_per_sender_per_hour, c.max_replies_per_thread_per_hour,
                                p.clock.now())  # fmt: skip
        if capped is None:  # the outbound caps (issue 30): per domain, all replies, all replies to strangers
            capped = await self._db(self._ledger().outbound_cap_reached, self.planned_domains(email, decision),
                                    per_domain=c.max_replies_per_domain_per_hour, per_hour=c.max_replies_per_hour,
                                    unverified=not decision.trusted, now=p.clock.now(),
                                    per_unverified=c.max_unauthenticated_replies_per_hour)  # fmt: skip
        if capped is not None:
            reason, until = capped
            await self._defer(mail, reason, until, count_attempt=False, **ids)
            log.info("mail uid=%s deferred until %s: %s", mail.key.uid, iso(until), reason)
            return
        if self.hold.active(p.clock.now()):  # the model path is known broken: no call until the hold's probe time
            await self._hold(mail, ids)
            return
        await self._move(mail, "handling", decision.reason, **ids)
        try:
            replied = await self.conversation.reply(email, decision)
        except RetryLater as exc:
            await self.retry_later(mail.key, exc.message)
            return
        except ConnectError as exc:  # a permanent SMTP rejection: the operator must look
            await self._finish(mail, "failed", exc.message)
            return
        except ConfigError as exc:  # a revoked key, an unknown model: the operator's to fix, not the mail's fault
            self.hold.fail(exc, p.clock.now())
            await self._hold(mail, ids)
            return
        if self.hold.clear("a reply went through"):
            self.release_held = True  # the probe worked: every held mail is due at once
        learn = decision.use_memory and decision.user_id is not None and replied.learnable
        if learn:  # "stop remembering me": their raw mail is never queued (agent/personal_data.py)
            assert decision.user_id is not None and p.store is not None
            learn = not await self._db(opted_out, p.store.db, decision.user_id)
        if learn:  # queued before the row turns final: a crash from here on loses no learning
            assert decision.user_id is not None and p.store is not None
            await self._db(learning.put, p.store.db, email.message_id, decision.user_id, ready.raw,
                           ready.internal_date)  # fmt: skip
        await self._finish(mail, replied.state, decision.reason)
        self.handled += 1
        if learn:
            await self.learn_queued(email.message_id)

    async def take_in(self, ready: Ready) -> None:
        """`quinn import`'s end of the path: a trusted sender's mail is stored (session, recall passages, files)
        and queued for learning (learnt per thread by the importer), then ``imported``; mail that may not use
        memory is left ``received`` with the reason and a hint."""
        mail, email, decision = ready.mail, ready.email, ready.decision
        if not decision.use_memory or decision.user_id is None:
            why = f"{NOT_TRUSTED_PREFIX}{decision.reason}; {VOUCH_HINT}"
            await self._db(self._ledger().set, mail.key, mail.state, why, message_id=email.message_id)
            log.info("mail %s id=%s: not imported: %s", mail.key.uid, email.message_id, decision.reason)
            return
        ids = {"message_id": email.message_id, "user_id": decision.user_id, "thread_key": ready.thread,
               "sender_key": decision.rate_key}  # fmt: skip
        await self._move(mail, "handling", decision.reason, **ids)
        if self.sent:  # the operator's side's words: threads and recall, never learnt as the recipient's
            await self.conversation.take_in_sent(email, decision)
            await self._finish(mail, "imported", decision.reason)
            self.handled += 1
            return
        await self.conversation.take_in(email, decision)
        fault_point("after_store")
        assert self.parts.store is not None
        if not await self._db(opted_out, self.parts.store.db, decision.user_id):  # as live mail: never queued
            await self._db(learning.put, self.parts.store.db, email.message_id, decision.user_id, ready.raw,
                           ready.internal_date)  # fmt: skip
        await self._finish(mail, "imported", decision.reason)
        self.handled += 1

    def planned_domains(self, email: InboundEmail, decision: Decision) -> set[str]:
        """The domains the reply to ``email`` will touch (``reply_domains``), known before the model is asked:
        its addresses as ``compose_reply`` picks them (a stranger's reply goes to From alone)."""
        config = self.parts.config
        to, cc, _ = reply_addresses(email, config.smtp.from_address, reply_all=config.smtp.reply_all,
                                    sender_only=not decision.trusted,
                                    limit=config.policy.max_recipients_per_reply)  # fmt: skip
        assert decision.sender is not None
        return reply_domains(decision.sender, [*to, *cc])

    async def learn_queued(self, message_id: str) -> None:
        """Learn from a queued mail, then take it off the queue. A try a crash interrupted is not repeated when
        its memories were already stored (they name the mail as their source): learning is applied once. A try
        that fails for a reason that passes stays queued with backoff (the last of ``MAX_ATTEMPTS`` tries logs
        the failure and lets go), and the user's later mails wait behind it."""
        store = self.parts.store
        assert store is not None
        p = self.parts
        lease_s = p.config.service.mail_lease_s
        user = await self._db(learning.user_of, store.db, message_id)
        if user is None or await self._db(learning.blocked, store.db, user, message_id):
            return  # learnt already, or an older mail of the user waits for a retry: this one follows it
        queued = await self._db(learning.begin, store.db, message_id, self.holder, p.clock.now(), lease_s)
        if queued is None:
            other = await self._db(learning.holder_of, store.db, message_id)
            if other is not None and holder_is_dead(other):  # a try this daemon began before a restart
                queued = await self._db(learning.begin, store.db, message_id, self.holder, p.clock.now(), lease_s,
                                        dead=other)  # fmt: skip
        if queued is None:
            return
        if queued.interrupted and await self._db(learning.already_learnt, store.db, queued.user_id, message_id):
            log.info("mail %s: learnt from before the interruption; not again", message_id)
        else:
            fault_point("before_learn")
            try:
                # Parsed once already (under the size limit of that day): off the loop again.
                email = await self.parse(queued.raw, queued.internal_date, sized=False)
                if isinstance(email, str):
                    raise RetryLater(f"the queued mail no longer parses: {email}")
                await self.conversation.learn(queued.user_id, email, transient=queued.attempts < MAX_ATTEMPTS)
            except ChildFailed:
                delay = min(LLM_RETRY_BASE * 2 ** (queued.attempts - 1), LLM_RETRY_MAX)
                await self._db(
                    learning.later, store.db, message_id, p.clock.now() + delay, "parsing it again was stopped"
                )
                log.warning("memory extraction for %s deferred (try %d, next in %s): parsing it again was stopped",
                            message_id, queued.attempts, delay)  # fmt: skip
                return
            except (RetryLater, ConnectError) as exc:
                delay = min(LLM_RETRY_BASE * 2 ** (queued.attempts - 1), LLM_RETRY_MAX)
                await self._db(learning.later, store.db, message_id, p.clock.now() + delay, str(exc))
                log.warning("memory extraction for %s deferred (try %d, next in %s): %s", message_id,
                            queued.attempts, delay, exc)  # fmt: skip
                return
            fault_point("after_learn")
        await self._db(learning.done, store.db, message_id)

    async def learn_pending(self) -> None:
        """Learn from what a crash or a failed try left queued and is due, oldest first (each folder pass,
        before new mail)."""
        store = self.parts.store
        assert store is not None
        for message_id in await self._db(learning.waiting, store.db):
            await self.learn_queued(message_id)

    async def retry_later(self, uid: int | MailKey, reason: str) -> None:
        """A transient failure: the mail is tried again with backoff, and fails after ``MAX_ATTEMPTS``."""
        key = uid if isinstance(uid, MailKey) else self.key(uid)
        record = await self._db(self._ledger().receive, key)
        if record.final:  # it failed after its outcome was recorded: the next pass only files it away
            return
        mail = InHand(key, record.state)
        attempts = record.attempts + 1
        if attempts >= MAX_ATTEMPTS:
            await self._finish(mail, "failed", f"gave up after {attempts} attempts: {reason}")
            return
        delay = min(LLM_RETRY_BASE * 2 ** (attempts - 1), LLM_RETRY_MAX)
        await self._defer(mail, reason, self.parts.clock.now() + delay)
        log.warning("mail uid=%s deferred (attempt %d, next in %s): %s", key.uid, attempts, delay, reason)

    async def _hold(self, mail: InHand, ids: dict[str, str | None]) -> None:
        """Defer a mail, without counting an attempt, until the setup error of ``self.hold`` is fixed."""
        assert self.hold.until is not None
        await self._defer(mail, self.hold.reason, self.hold.until, count_attempt=False, **ids)
        self.hold.hold()
        log.info("mail uid=%s held until %s: the setup error above", mail.key.uid, iso(self.hold.until))

    async def _is_own_copy(self, mail: InHand, email: InboundEmail) -> bool:
        """Our own reply, back through smtp.copy_to_self: proof that its send went through; filed as sent.

        The Message-ID alone proves nothing: a reply's is derived from the mail it answers and a digest's is
        numbered, so a stranger could send one and mark a reply still waiting for the server as sent (never
        delivered). A copy must carry the reply's own text (``carries_text_of``), which only Quinn wrote."""
        ledger = self._ledger()
        outbox = Outbox(ledger.db)
        item = await self._db(outbox.get, email.message_id)
        if item is None:
            return False
        if (item.raw or item.state in ("pending", "sending")) and not await asyncio.to_thread(
            carries_text_of, item.raw, email
        ):
            log.warning("mail uid=%s has the Message-ID of our reply %s but not its text: not our copy, handled as "
                        "any mail", mail.key.uid, item.message_id)  # fmt: skip
            return False
        if item.state in ("pending", "sending"):
            # The server accepted it (for every recipient or none), whatever our last try concluded.
            await self._db(outbox.mark, item.message_id, "sent")
            await self._db(ledger.due_now, item.in_reply_to)  # its mail need not wait for a retry to finish
        await self._finish(mail, "ignored", "copy of our own reply", message_id=email.message_id,
                           folder=self.parts.config.imap.sent_folder)  # fmt: skip
        return True

    # -- the moves -------------------------------------------------------------------------------------

    async def _move(self, mail: InHand, state: str, reason: str, **ids: str | None) -> None:
        """Record the move of ``mail`` to ``state`` (checked against the state machine) with its reason."""
        states.check(mail.state, state)
        await self._db(self._ledger().set, mail.key, state, reason, **ids)
        mail.state = state

    async def _defer(self, mail: InHand, reason: str, until: Any, *, count_attempt: bool = True,
                     **ids: str | None) -> None:  # fmt: skip
        """Move ``mail`` to ``deferred`` until ``until``; ``count_attempt``: a failure (not a cap or a hold)."""
        await self._move(mail, "deferred", reason, **ids)
        await self._db(self._ledger().defer, mail.key, reason, until, count_attempt=count_attempt)

    async def _finish(self, mail: InHand, state: str, reason: str, *, folder: str | None = None,
                      answered: bool | None = None, **ids: str | None) -> None:  # fmt: skip
        """Move ``mail`` to a final state, then file it away."""
        await self._move(mail, state, reason, **ids)
        self.metrics.mail_finished(state)
        log.info("mail uid=%s -> %s: %s", mail.key.uid, state, reason)
        fault_point("before_move")
        await self._file_away(mail.key, state, reason, folder=folder, answered=answered)

    async def _file_away(self, key: MailKey, state: str, reason: str = "", *, folder: str | None = None,
                         answered: bool | None = None) -> None:  # fmt: skip
        """Flag and move a finished mail: quarantine for the operator, our reply copies to the sent folder,
        the rest to the processed folder. \\Answered when it was answered (RFC 3501 §2.3.2)."""
        if not self.replying:  # an import source is only read: nothing to flag or move
            await self._db(self._ledger().mark_moved, key)
            return
        c = self.parts.config.imap
        if folder is None:
            own_copy = state == "ignored" and reason == "copy of our own reply"
            folder = c.sent_folder if own_copy else (
                c.quarantine_folder if state in ("quarantined", "failed") else c.processed_folder)  # fmt: skip
        if answered is None:
            answered = state in ("replied", "drafted") or reason.endswith((": replied", ": drafted"))
        with self.metrics.stage("mark"):
            await self._imap(self.parts.mailbox.file_away, key.uid, folder, answered=answered)
            await self._db(self._ledger().mark_moved, key)
