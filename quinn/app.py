"""Quinn: the one app object. Built from a Config; the only place where mailbox, agent and memory meet.

One email's path reads top to bottom in ``Quinn.handle``: ledger → size → fetch → parse → policy → session →
context → reply (outbox first) → send → file away → extract memories. Every step is idempotent on
(folder, UIDVALIDITY, UID), so after a crash the daemon resumes where the database says it was.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from quinn.agent import digest
from quinn.agent.consent import opted_out
from quinn.agent.context import ThreadMessage, others_on_thread
from quinn.agent.extract import ExtractionOutcome
from quinn.agent.llm import LLM
from quinn.agent.memory_mail import NO_LEARNING_TEMPLATES, PURGE_DONE_TEMPLATE
from quinn.agent.prompts import TEMPLATE_NAMES, PromptStore
from quinn.agent.respond import Agent, Answer, recallable
from quinn.agent.samples import sample_variables
from quinn.clock import Clock, iso, utcnow
from quinn.config import Config
from quinn.documents.extract import Extracted
from quinn.documents.library import take_documents
from quinn.errors import ConfigError, ConnectError, MailParseError, QuinnError, RetryLater
from quinn.faults import fault_point
from quinn.hardening import fit_torch_to_sandbox
from quinn.hold import HELD_PREFIX, SetupHold
from quinn.mailbox.backlog import ANSWER_HINT, Watches, WatchMark
from quinn.mailbox.backoff import Backoff
from quinn.mailbox.delivery import Delivery
from quinn.mailbox.identity import canonical_address, user_for
from quinn.mailbox.imap import IMAP_FAILURES, HostUnknown, ImapLoginRejected, ImapMailbox
from quinn.mailbox.ledger import HANDED_ON_STATES, MailKey, MailLedger
from quinn.mailbox.message import InboundEmail
from quinn.mailbox.outbox import Outbox
from quinn.mailbox.parse import parse_email
from quinn.mailbox.policy import UNVERIFIED_PREFIX, Decision, Rules, decide, trust_warnings
from quinn.mailbox.smtp import LOOP_HEADER, Reply, SmtpSender, compose_reply, reply_message_id
from quinn.mailbox.threads import Sessions, thread_key
from quinn.memory.db import Database
from quinn.memory.embed import embedder_for
from quinn.memory.models import Memory
from quinn.memory.passages import index_message
from quinn.memory.store import MemoryStore
from quinn.metrics import Metrics
from quinn.reload import ReloadPlan, plan_reload
from quinn.scheduler.context import JobContext
from quinn.scheduler.runner import JobRunner
from quinn.scheduler.summarize import reply_with_summary, wants_summary

log = logging.getLogger(__name__)

MAILBOX_PURGE_WINDOW_S = 600.0  # how long after a purge the user's late copies are still looked for
P = ParamSpec("P")
R = TypeVar("R")

BACKOFF_START_S = 1.0
LOGIN_RETRY_MAX_S = 3600.0
LLM_RETRY_BASE = timedelta(minutes=1)
LLM_RETRY_MAX = timedelta(hours=1)
MAX_ATTEMPTS = 12


@dataclass(frozen=True)
class Asked:
    """What ``Quinn.ask`` did: the answer, the memories its prompt showed the model, and what was learnt."""

    user: str
    answer: Answer
    used: list[Memory]
    learnt: list[Memory]


class Quinn:
    """The daemon: owns the mailbox, the store, the agent and the scheduler."""

    delivery: Delivery  # built in start(), once the database is open

    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.prompts = PromptStore(config.prompts.dir, samples=sample_variables)
        for name in TEMPLATE_NAMES:  # a broken template is a startup error, not a failure on the first mail
            self.prompts.load(name)
        self.rules = Rules.from_config(config, LOOP_HEADER)
        self.llm = LLM(config.llm)
        self.sender = SmtpSender(config.smtp)
        self.mailbox = ImapMailbox(config.imap)
        self.db: Database | None = None
        self.store: MemoryStore | None = None
        self.agent: Agent | None = None
        self.scheduler: JobRunner | None = None
        self._imap_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quinn-imap")
        self._stop = threading.Event()
        self._in_flight: asyncio.Task[Any] | None = None
        self.handled = 0
        self.handling: int | None = None  # the UID in hand, learning included (`quinn demo` waits for it)
        self.metrics = Metrics()
        self.hold = SetupHold()
        self._release_held = True  # at start and after a reload: the operator may have fixed the setup
        self._mark: WatchMark | None = None  # from which UID on the watched folder is answered (the backlog rule)
        self._backlog_said: int | None = None  # the backlog size last logged
        # Purged users whose mail leaves the mailbox: until when (monotonic), and when the purge was confirmed.
        self._mailbox_purges: dict[str, tuple[float, datetime]] = {}

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Log in to IMAP, open the database, load the embedder. A rejected login or a bad database is fatal
        and explained; an unreachable IMAP server is not (the run loop keeps trying, saying so)."""
        c = self.config
        for warning in trust_warnings(self.rules):  # said at every start, loudly: the operator must not miss it
            log.warning("%s", warning)
        # Cheapest and likeliest mistakes first: the IMAP login, then the database, then the slow model load.
        try:
            await self._imap(self.mailbox.connect)
        except HostUnknown:
            raise  # a typo in the config, not an outage: quinn run exits with it (systemd retries later)
        except ConnectError as exc:
            log.error("%s; will keep trying", exc)
        await self.open_memory()
        assert self.store is not None
        if c.scheduler.enabled:
            self.scheduler = JobRunner(self.store, self.llm, self.prompts, c.scheduler, clock=self.clock,
                                       retention=c.retention)  # fmt: skip
            await self.scheduler.start()
        self.delivery = Delivery(c.smtp, c.imap, Outbox(self.db), self.sender, self.mailbox, self._db, self._imap)
        if self.mailbox.connected:
            await self._resync()
        mode = ("IDLE" if self.mailbox.can_idle else "polling") if self.mailbox.connected else "not connected yet"
        log.info("quinn started: %s, folder %s, uidvalidity %s, %s", self.mailbox.where, c.imap.folder,
                 self.mailbox.uidvalidity, mode)  # fmt: skip

    async def open_memory(self) -> None:
        """Open the database and load the embedder, and build the agent on them (``start``, and ``quinn ask``,
        which needs no mailbox)."""
        c = self.config
        self.db = Database.open(c.database.url, c.database.secret("auth_token"))
        if c.embeddings.backend == "sentence-transformers":
            fit_torch_to_sandbox()  # under MemoryDenyWriteExecute=yes torch's JIT kernels would fail
        embedder = await asyncio.to_thread(embedder_for, c.embeddings)
        self.store = MemoryStore(self.db, embedder)
        self.agent = Agent(c, self.llm, self.prompts, self.store, self.metrics.stage)

    def stop(self) -> None:
        """Ask the loop to stop taking new mail; the mail in flight is finished (SIGTERM)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """True once ``stop`` was called."""
        return self._stop.is_set()

    async def close(self) -> None:
        """Release connections."""
        await self._imap(self.mailbox.close)
        self._imap_thread.shutdown(wait=True)
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.db is not None:
            self.db.close()

    async def run(self, on_ready: Callable[[], None] | None = None) -> None:
        """The daemon's main loop: handle what is in the folder, wait for more, reconnect on failure.

        Every IMAP failure (kick, BYE, server restart, refused, timeout, NO/BAD) closes the connection and
        reconnects with jittered exponential backoff; a password rejected while running is retried slowly.
        Each wait is logged, so the daemon is never silently stuck. ``on_ready`` is called once everything is up
        (systemd's READY=1 and the metrics endpoint hang on it).
        """
        await self.start()
        if on_ready is not None:
            on_ready()
        c = self.config.imap
        backoff = Backoff(BACKOFF_START_S, c.reconnect_max_s)
        login_backoff = Backoff(c.login_retry_s, max(c.login_retry_s, LOGIN_RETRY_MAX_S))
        try:
            while not self._stop.is_set():
                try:
                    if not self.mailbox.connected:
                        await self._imap(self.mailbox.connect)
                        log.info("IMAP reconnected to %s after %d failed tries", self.mailbox.where,
                                 backoff.failures + login_backoff.failures)  # fmt: skip
                        backoff.reset()
                        login_backoff.reset()
                        await self._resync()
                    await self.process_folder()
                    if self._stop.is_set():
                        break
                    await self._imap(self.mailbox.wait, await self._wait_s(), self._stop)
                except ImapLoginRejected as exc:
                    delay = login_backoff.next_delay()
                    log.error("IMAP login rejected while running (%s); the server may be changing passwords, "
                              "trying again in %.0fs", exc, delay)  # fmt: skip
                    await self._sleep(delay)
                except IMAP_FAILURES as exc:
                    await self._imap(self.mailbox.close)
                    delay = backoff.next_delay()
                    why = exc.message if isinstance(exc, QuinnError) else f"{exc.__class__.__name__}: {exc}"
                    log.warning("IMAP connection lost (%s); reconnecting in %.1fs", why, delay)
                    await self._sleep(delay)
        finally:
            await self.close()
        log.info("quinn stopped after handling %d mails", self.handled)

    async def _sleep(self, seconds: float) -> None:
        """Wait, but wake at once on stop."""
        await asyncio.to_thread(self._stop.wait, seconds)

    async def _wait_s(self) -> float:
        """How long to wait for new mail: one poll interval (with IDLE also never past its renewal), but no
        longer than until the next deferred mail is due."""
        c = self.config.imap
        # With IDLE, poll_interval_s still bounds a wait: the safety net for a change that reached the server
        # between our last command and the IDLE, which Dovecot reports only when the IDLE ends.
        wait_s = min(c.idle_renew_s, c.poll_interval_s) if self.mailbox.can_idle else c.poll_interval_s
        assert self.store is not None
        due = await self._db(MailLedger(self.store.db).next_due, c.folder, self.mailbox.uidvalidity)
        if due is not None:
            wait_s = min(wait_s, max((due - utcnow()).total_seconds() + 1, 0.0))
        return wait_s

    async def _resync(self) -> None:
        """After (re)connecting: ledger rows of another UIDVALIDITY that never finished are superseded."""
        assert self.store is not None
        stale = await self._db(MailLedger(self.store.db).resync, self.config.imap.folder, self.mailbox.uidvalidity)
        if stale:
            log.warning("UIDVALIDITY of %s is now %d: %d unfinished mails will be taken up again by Message-ID",
                        self.config.imap.folder, self.mailbox.uidvalidity, stale)  # fmt: skip
        await self._watch()

    async def _watch(self) -> None:
        """Record when Quinn first watched the folder (under this UIDVALIDITY): mail from before is the backlog."""
        assert self.store is not None
        c = self.config.imap
        uidnext = await self._imap(self.mailbox.uidnext)
        mark, why = await self._db(Watches(self.store.db).watch, c.folder, self.mailbox.uidvalidity, uidnext,
                                   c.backlog == "answer")  # fmt: skip
        if why is not None:
            log.info("watching %s from uid %d (uidvalidity %d): %s", c.folder, mark.first_uid, mark.uidvalidity, why)
        self._mark = mark

    async def _skip_backlog(self, uids: list[int]) -> list[int]:
        """The UIDs to handle: the backlog (mail from before the first watch) stays in the folder, untouched."""
        assert self.store is not None
        if self._mark is None or self._mark.uidvalidity != self.mailbox.uidvalidity:
            await self._watch()
        assert self._mark is not None
        waiting = self._mark.waiting(uids)
        if len(waiting) != self._mark.skipped:
            await self._db(Watches(self.store.db).count_skipped, self._mark.folder, len(waiting))
            self._mark = await self._db(Watches(self.store.db).get, self._mark.folder)
        if waiting and len(waiting) != self._backlog_said:
            assert self._mark is not None
            log.info("%d mails in %s arrived before Quinn first watched it (%s) and are left alone; %s",
                     len(waiting), self._mark.folder, self._mark.watched_at, ANSWER_HINT)  # fmt: skip
        self._backlog_said = len(waiting)
        return [uid for uid in uids if uid >= self._mark.first_uid]

    async def _imap(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._imap_thread, lambda: fn(*args, **kwargs))

    async def _db(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        assert self.db is not None
        return await self.db.run(fn, *args, **kwargs)

    # -- one folder pass -------------------------------------------------------------------------------

    async def process_folder(self) -> int:
        """Handle every message in the watched folder once; returns how many were looked at."""
        if await self._imap(self.mailbox.check_uidvalidity) is not None:
            await self._resync()
        if self._release_held:
            self._release_held = False
            assert self.store is not None
            released = await self._db(MailLedger(self.store.db).release, HELD_PREFIX)
            if released:
                log.info("%d mails held for a setup error are tried again now", released)
        uids = await self._skip_backlog(await self._imap(self.mailbox.uids))
        sizes = await self._imap(self.mailbox.sizes, uids)
        for uid in uids:
            if self._stop.is_set():
                break
            if uid in sizes:
                self.handling = uid
                with self.metrics.stage("mail"):
                    try:
                        await self.handle(uid, sizes[uid])
                    except (*IMAP_FAILURES, ImapLoginRejected):
                        raise  # the run loop reconnects
                    except Exception as exc:  # a bug, or a failure nobody foresaw: this mail waits, the rest go on
                        log.exception("mail uid=%s: unexpected %s", uid, exc.__class__.__name__)
                        await self._retry_later(uid, f"unexpected {exc.__class__.__name__}: {exc}")
                    finally:
                        self.handling = None
        if self._mailbox_purges:
            await self._purge_mailboxes()
        await self._send_digests()
        return len(uids)

    async def _send_digests(self) -> None:
        """Mail the digests the digest job planned (agent/digest.py) through the outbox, as replies go: sent
        exactly once, a copy filed. One the server will not take now waits in the outbox for the next pass."""
        assert self.store is not None and self.delivery is not None
        c = self.config.smtp
        outbox = Outbox(self.store.db)
        for planned in await self._db(digest.unsent, self.store.db):
            made = await self._db(digest.compose, self.store, planned, own_address=c.from_address,
                                  own_name=c.from_name, now=self.clock.now())  # fmt: skip
            if made is not None:
                mail, listed = made
                await self._db(outbox.put, mail.message_id, "", planned.user_id, None, mail.recipients, mail.raw,
                               template=digest.TEMPLATE)  # fmt: skip
                await self._db(digest.composed, self.store.db, planned.id, mail.message_id, listed)
        if self.hold.active(utcnow()):  # a setup error holds the mail: digests wait for the fix too
            return
        for item in await self._db(outbox.pending, digest.TEMPLATE):
            try:
                await self.delivery.deliver(item)
                log.info("digest %s sent to %s", item.message_id, item.user_id)
            except RetryLater as exc:
                log.warning("digest %s not sent yet (%s); trying again after the next pass", item.message_id,
                            exc.message)  # fmt: skip
                return  # the server is struggling: the others wait too
            except ConnectError as exc:  # refused for good: marked failed in the outbox, never tried again
                log.error("digest %s refused by the SMTP server: %s", item.message_id, exc.message)
            except ConfigError as exc:  # the login was refused: every mail waits for the operator (logged)
                self.hold.fail(exc, utcnow())
                return

    async def handle(self, uid: int, size: int) -> None:
        """Take one message as far as it can go now. Never raises for a problem with the mail itself."""
        assert self.store is not None
        key = MailKey(self.config.imap.folder, self.mailbox.uidvalidity, uid)
        ledger = MailLedger(self.store.db)
        record = await self._db(ledger.receive, key)
        if record.final:
            if not record.moved:  # a crash between "done" and "filed away"
                await self._file_away(ledger, key, record.state, record.reason)
            return
        if record.state == "superseded" or not record.due(utcnow()):
            return
        limit_kb = self.config.imap.max_message_kb
        if size > limit_kb * 1024:
            await self._finish(ledger, key, "quarantined", f"too large: {size} bytes > {limit_kb} KiB")
            return
        with self.metrics.stage("fetch"):
            fetched = await self._imap(self.mailbox.fetch, uid)
        if fetched is None:  # expunged since the pass began (by a person, or our own copy filed at once)
            await self._db(ledger.set, key, "ignored", "gone from the folder before it was read")
            await self._db(ledger.mark_moved, key)
            return
        fault_point("after_fetch")
        try:
            with self.metrics.stage("parse"):
                email = parse_email(fetched.raw, internal_date=fetched.internal_date,
                                    max_bytes=self.config.imap.max_message_kb * 1024)  # fmt: skip
        except MailParseError as exc:
            await self._finish(ledger, key, "quarantined", f"unparseable: {exc.message}")
            return
        if await self._is_own_copy(ledger, key, email):
            return
        earlier = await self._db(ledger.elsewhere, email.message_id, key)
        if earlier is not None and earlier.final:
            # The same mail twice (a second copy, or seen again after a UIDVALIDITY change): answered once.
            reason = f"duplicate of uid {earlier.key.uid}: {earlier.state}"
            await self._finish(ledger, key, "ignored", reason, message_id=email.message_id)
            return
        if earlier is not None and earlier.state in HANDED_ON_STATES:
            # Seen before under another key: a UIDVALIDITY change, or the operator's `mail status --retry`
            # moved it back from quarantine (a MOVE gives it a new UID, RFC 6851 §3.3).
            record = await self._db(ledger.carry_over, earlier, key)
            log.info("mail uid=%s id=%s: carried on from %s/%s (%s)", uid, email.message_id,
                     earlier.key.uidvalidity, earlier.key.uid, earlier.state)  # fmt: skip
            if not record.due(utcnow()):
                return
        elif earlier is not None:
            return  # another live copy of this mail is in progress; this one waits for its outcome
        decision = decide(email, self.rules)
        log.info("mail uid=%s id=%s from=%s: %s (%s)", uid, email.message_id, email.sender, decision.action,
                 decision.reason)  # fmt: skip
        if decision.action != "handle":
            await self._finish(ledger, key, "ignored" if decision.action == "ignore" else "rejected",
                               decision.reason, message_id=email.message_id, user_id=decision.user_id)  # fmt: skip
            return
        assert decision.rate_key is not None
        # Mail nobody vouched for is counted in buckets of its own: forged mail never spends a user's caps.
        thread = thread_key(email) if decision.trusted else UNVERIFIED_PREFIX + thread_key(email)
        p = self.config.policy
        capped = await self._db(ledger.cap_reached, decision.rate_key, thread, p.max_replies_per_sender_per_hour,
                                p.max_replies_per_thread_per_hour)  # fmt: skip
        if capped is not None:
            reason, until = capped
            await self._db(ledger.set, key, "deferred", reason, message_id=email.message_id,
                           user_id=decision.user_id, thread_key=thread, sender_key=decision.rate_key)  # fmt: skip
            await self._db(ledger.defer, key, reason, until, count_attempt=False)
            log.info("mail uid=%s deferred until %s: %s", uid, iso(until), reason)
            return
        if self.hold.active(utcnow()):  # the model path is known broken: no call until the hold's probe time
            await self._hold(ledger, key, email, decision, thread)
            return
        await self._db(ledger.set, key, "handling", decision.reason, message_id=email.message_id,
                       user_id=decision.user_id, thread_key=thread, sender_key=decision.rate_key)  # fmt: skip
        try:
            state = await self._reply(email, decision)
        except RetryLater as exc:
            await self._retry_later(uid, exc.message)
            return
        except ConnectError as exc:  # a permanent SMTP rejection: the operator must look
            await self._finish(ledger, key, "failed", exc.message)
            return
        except ConfigError as exc:  # a revoked key, an unknown model: the operator's to fix, not the mail's fault
            self.hold.fail(exc, utcnow())
            await self._hold(ledger, key, email, decision, thread)
            return
        if self.hold.clear("a reply went through"):
            self._release_held = True  # the probe worked: every held mail is due at once
        await self._finish(ledger, key, state, decision.reason)
        self.handled += 1
        if decision.use_memory and decision.user_id is not None:
            await self._learn(decision.user_id, email)

    async def _retry_later(self, uid: int, reason: str) -> None:
        """A transient failure: the mail is tried again with backoff, and fails after ``MAX_ATTEMPTS``."""
        assert self.store is not None
        key = MailKey(self.config.imap.folder, self.mailbox.uidvalidity, uid)
        ledger = MailLedger(self.store.db)
        record = await self._db(ledger.receive, key)
        if record.final:  # it failed after its outcome was recorded: the next pass only files it away
            return
        attempts = record.attempts + 1
        if attempts >= MAX_ATTEMPTS:
            await self._finish(ledger, key, "failed", f"gave up after {attempts} attempts: {reason}")
            return
        delay = min(LLM_RETRY_BASE * 2 ** (attempts - 1), LLM_RETRY_MAX)
        await self._db(ledger.defer, key, reason, utcnow() + delay)
        log.warning("mail uid=%s deferred (attempt %d, next in %s): %s", uid, attempts, delay, reason)

    async def _hold(
        self, ledger: MailLedger, key: MailKey, email: InboundEmail, decision: Decision, thread: str
    ) -> None:
        """Defer a mail, without counting an attempt, until the setup error of ``self.hold`` is fixed."""
        assert self.hold.until is not None
        await self._db(ledger.set, key, "deferred", self.hold.reason, message_id=email.message_id,
                       user_id=decision.user_id, thread_key=thread, sender_key=decision.rate_key)  # fmt: skip
        await self._db(ledger.defer, key, self.hold.reason, self.hold.until, count_attempt=False)
        self.hold.hold()
        log.info("mail uid=%s held until %s: the setup error above", key.uid, iso(self.hold.until))

    async def _is_own_copy(self, ledger: MailLedger, key: MailKey, email: InboundEmail) -> bool:
        """Our own reply, back through smtp.copy_to_self: proof that its send went through; filed as sent."""
        outbox = Outbox(ledger.db)
        item = await self._db(outbox.get, email.message_id)
        if item is None:
            return False
        if item.state in ("pending", "sending"):
            # The server accepted it (for every recipient or none), whatever our last try concluded.
            await self._db(outbox.mark, item.message_id, "sent")
            await self._db(ledger.due_now, item.in_reply_to)  # its mail need not wait for a retry to finish
        await self._finish(ledger, key, "ignored", "copy of our own reply", message_id=email.message_id,
                           folder=self.config.imap.sent_folder)  # fmt: skip
        return True

    async def _finish(
        self, ledger: MailLedger, key: MailKey, state: str, reason: str, *, folder: str | None = None,
        answered: bool | None = None, **ids: str | None,
    ) -> None:  # fmt: skip
        await self._db(ledger.set, key, state, reason, **ids)
        self.metrics.mail_finished(state)
        log.info("mail uid=%s -> %s: %s", key.uid, state, reason)
        fault_point("before_move")
        await self._file_away(ledger, key, state, reason, folder=folder, answered=answered)

    async def _file_away(
        self, ledger: MailLedger, key: MailKey, state: str, reason: str = "", *, folder: str | None = None,
        answered: bool | None = None,
    ) -> None:  # fmt: skip
        """Flag and move a finished mail: quarantine for the operator, our reply copies to the sent folder,
        the rest to the processed folder. \\Answered when it was answered (RFC 3501 §2.3.2)."""
        c = self.config.imap
        if folder is None:
            own_copy = state == "ignored" and reason == "copy of our own reply"
            folder = c.sent_folder if own_copy else (
                c.quarantine_folder if state in ("quarantined", "failed") else c.processed_folder)  # fmt: skip
        if answered is None:
            answered = state in ("replied", "drafted") or reason.endswith((": replied", ": drafted"))
        with self.metrics.stage("mark"):
            await self._imap(self.mailbox.file_away, key.uid, folder, answered=answered)
            await self._db(ledger.mark_moved, key)

    # -- the reply -------------------------------------------------------------------------------------

    async def _reply(self, email: InboundEmail, decision: Decision) -> str:
        """Write the reply to the outbox (once), deliver it, and keep it in the conversation. Returns the state."""
        assert self.store is not None and decision.sender is not None
        db = self.store.db
        outbox = Outbox(db)
        user = decision.user_id or decision.sender  # a stranger's address only names the reply's recipient
        own = self.config.smtp.from_address
        message_id = reply_message_id(email.message_id, own)
        item = await self._db(outbox.get, message_id)
        # A purge receipt waiting to be sent again: the person is gone, so the mail is not stored again either.
        receipt = item is not None and await self._db(outbox.template_of, message_id) == PURGE_DONE_TEMPLATE
        session_id = None
        documents: list[Extracted] = []
        with self.metrics.stage("thread"):  # the session, the stored message and the thread buffer
            if decision.use_memory and not receipt:
                session_id = await self._join_session(email, decision, user)
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
            item = await self._db(outbox.put, reply.message_id, email.message_id, user if keep else None,
                                  session_id if keep else None, reply.recipients, reply.raw,
                                  template=answer.template, prompt_version=answer.prompt_version)  # fmt: skip
            if session_id is not None and keep:
                await self._keep_reply(session_id, user, email, reply, answer.template)
        with self.metrics.stage("send"):
            state = await self.delivery.deliver(item)
        if receipt:
            await self._db(self._forget_receipt, item.message_id, email.message_id)
            # Their mail goes from the mailbox too, once this pass has filed it away (the confirming mail is
            # still in the watched folder now); the receipt's own copy may come later, hence a window.
            # To the microsecond: INTERNALDATE has whole seconds, and the confirming mail came in this very second.
            self._mailbox_purges[user] = (time.monotonic() + MAILBOX_PURGE_WINDOW_S, datetime.now(UTC))
        return state

    async def _join_session(self, email: InboundEmail, decision: Decision, user: str) -> str:
        """Join the mail to its session and store it there (memory mail only); returns the session id."""
        assert self.store is not None
        sessions = Sessions(self.store.db, self.config.policy.subject_window_days)
        # Joining a thread by its subject alone needs our server's word that the sender is the user.
        session_id = await self._db(sessions.assign, email, user, by_subject=decision.authenticated)
        await self._db(sessions.store_inbound, session_id, user, email)
        if await self._recallable(email, user):  # conversation recall: the mail is searchable from now on
            await self._db(index_message, self.store, user, email.message_id, "in")
        return session_id

    async def _documents(self, email: InboundEmail, user: str, session_id: str) -> list[Extracted]:
        """The mail's attachments read, kept for the user and (when the mail joins recall) searchable."""
        assert self.store is not None
        with self.metrics.stage("documents"):
            return await take_documents(self.store, self.config.documents, email, user, session_id,
                                        searchable=await self._recallable(email, user))  # fmt: skip

    async def _answer(
        self, email: InboundEmail, decision: Decision, user: str, session_id: str | None,
        thread: list[ThreadMessage], summary: str | None, documents: Sequence[Extracted] = (),
    ) -> Answer:  # fmt: skip
        """The answer to one mail (a summary asked for, or the agent's reply), its token cost recorded."""
        assert self.agent is not None and self.store is not None
        answer = None
        if session_id is not None and wants_summary(email.text):  # "summarize this and remember it"
            context = JobContext("summarize", self.store, self.llm, self.prompts, self.config.scheduler, self.clock)
            answer = await reply_with_summary(context, session_id)
        if answer is None:
            with self.metrics.llm_call(self.llm.model_id, "reply"):
                answer = await self.agent.answer(email, user, decision.use_memory, thread=thread, summary=summary,
                                                 session_id=session_id, withheld=decision.withheld,
                                                 documents=documents)  # fmt: skip
        # Cost is counted per trusted sender even without memory; after a purge the user's name stays out of it.
        counted = decision.user_id if decision.trusted and not answer.purged else None
        await self.agent.record(answer.template, answer.usage, counted, email.message_id)
        return answer

    def _compose(self, email: InboundEmail, decision: Decision, answer: Answer) -> Reply:
        """The reply as a mail. What carries memory wholesale, and anything for a stranger, goes to From alone."""
        files = [(a.filename, a.content_type, a.data) for a in answer.attachments]
        c = self.config.smtp
        return compose_reply(email, answer.body, own_address=c.from_address, own_name=c.from_name,
                             reply_all=c.reply_all, attachments=files,
                             sender_only=answer.private or not decision.trusted)  # fmt: skip

    async def _keep_reply(self, session_id: str, user: str, email: InboundEmail, reply: Reply, template: str) -> None:
        """Store Quinn's reply in the conversation, so the thread's next mail sees it; the model's answer (not a
        command's) joins conversation recall."""
        assert self.store is not None
        sessions = Sessions(self.store.db)
        own = self.config.smtp.from_address
        await self._db(sessions.store_outbound, session_id, user, reply.message_id, email.message_id,
                       reply.subject, own, reply.recipients, reply.body)  # fmt: skip
        await self._db(sessions.link, session_id, reply.message_id)
        if template == "reply" and await self._recallable(email, user):
            await self._db(index_message, self.store, user, reply.message_id, "out")

    async def ask(self, email: InboundEmail) -> Asked:
        """``quinn ask``: one message from the operator's terminal, answered on the daemon's path for a trusted
        user (session, memory, the reply template and tools, extraction), without IMAP or SMTP: nothing is sent.

        The From address is the user: the terminal is the operator's, so it is trusted by construction.
        """
        assert self.agent is not None and self.store is not None and email.from_ is not None
        r = self.rules
        user = user_for(canonical_address(email.from_.address), r.aliases, r.plus_addressing)  # as decide() does
        decision = Decision("handle", "asked from the terminal", user_id=user, authenticated=True, use_memory=True,
                            sender=user, rate_key=user)  # fmt: skip
        session_id = await self._join_session(email, decision, user)
        thread, summary = await self._db(self._thread, email, user, session_id)
        documents = await self._documents(email, user, session_id)
        answer = await self._answer(email, decision, user, session_id, thread, summary, documents)
        if not answer.purged:
            await self._keep_reply(session_id, user, email, self._compose(email, decision, answer), answer.template)
        outcome = None if answer.purged else await self._learn(user, email, template=answer.template)
        learnt = [*outcome.created, *outcome.updated] if outcome is not None else []
        return Asked(user, answer, await self._db(self._memories, user, answer.shown),
                     await self._db(self._memories, user, learnt))  # fmt: skip

    def _memories(self, user: str, ids: Sequence[int]) -> list[Memory]:
        """The user's memories of ``ids``, in that order (runs on the DB thread)."""
        assert self.store is not None
        found = (self.store.get(i, user_id=user) for i in dict.fromkeys(ids))
        return [m for m in found if m is not None]

    async def _purge_mailboxes(self) -> None:
        """Delete the mail of users purged in the last ``MAILBOX_PURGE_WINDOW_S`` from Quinn's folders: what they
        sent and Quinn's replies to them (drafts are left to the person who reviews them)."""
        now = time.monotonic()
        for user, (until, confirmed_at) in list(self._mailbox_purges.items()):
            if now > until:
                del self._mailbox_purges[user]
                continue
            removed = await self._imap(self.mailbox.purge_address, user, self.config.smtp.from_address,
                                       received_before=confirmed_at)  # fmt: skip
            if removed:
                log.info("purge: %d mails of the purged user deleted from the mailbox", removed)

    def _forget_receipt(self, receipt_id: str, confirmation_id: str) -> None:
        """Once the purge receipt is delivered, it and the confirming mail's ledger row were the last traces of
        the person: drop them, and vacuum so they leave the file's bytes too (runs on the DB thread)."""
        assert self.db is not None
        Outbox(self.db).forget_delivered(receipt_id)
        MailLedger(self.db).unlink(confirmation_id)
        self.db.vacuum()

    def _thread(self, email: InboundEmail, user: str, session_id: str | None) -> tuple[list[ThreadMessage], str | None]:
        """The thread buffer and rolling summary of the mail's session (runs on the DB thread).

        With others on this mail, the thread text obeys the rule of private memories: only the messages every one
        of them already saw, and no summary (it may fold in what the user said to Quinn alone)."""
        assert self.store is not None
        if session_id is None:
            return [], None
        sessions = Sessions(self.store.db)
        others = set(others_on_thread(email, user, self.config.smtp.from_address))
        thread = [  # after a milestone summary: only the messages it does not cover
            ThreadMessage(m.from_addr, m.sent_at, m.body, m.message_id)
            for m in sessions.recent(session_id, limit=12)
            if m.message_id != email.message_id and others <= m.participants
        ]
        return thread, None if others else sessions.summary(session_id)

    async def _recallable(self, email: InboundEmail, user: str) -> bool:
        """Whether the mail joins conversation recall: not a memory command or confirmation (`recallable`), and
        not from someone who asked not to be remembered (their mail is kept for threading, never indexed)."""
        assert self.store is not None
        return recallable(email) and not await self._db(opted_out, self.store.db, user)

    async def _learn(self, user: str, email: InboundEmail, *, template: str | None = None) -> ExtractionOutcome | None:
        """Extract memories from the mail; a failure here never affects the reply already sent. ``template``: the
        reply's, when known (else read from the outbox)."""
        assert self.agent is not None and self.store is not None
        if template is None:
            reply_id = reply_message_id(email.message_id, self.config.smtp.from_address)
            template = await self._db(Outbox(self.store.db).template_of, reply_id)
        if template in NO_LEARNING_TEMPLATES:  # a purge question or its answer: nothing may be learnt from it
            log.info("mail %s: no extraction after %s", email.message_id, template)
            return None
        try:
            with self.metrics.llm_call(self.llm.background_model_id, "extract"):
                return await self.agent.learn(user, email)
        except QuinnError as exc:
            log.warning("memory extraction for %s failed: %s", email.message_id, exc)
        except IMAP_FAILURES:
            raise
        except Exception:  # a bug: the reply is out and the mail filed; the daemon goes on
            log.exception("memory extraction for %s failed", email.message_id)
        return None

    def reload(self, new: Config | None = None) -> ReloadPlan:
        """SIGHUP: apply the reloadable part of ``new`` (default: the current config) and re-read the templates.

        Raises ``QuinnError`` (and changes nothing) when the new templates or model settings do not work; a
        template that fails only keeps its last good version when the store existed before.
        """
        plan = plan_reload(self.config, new or self.config)
        c = plan.config
        prompts = PromptStore(c.prompts.dir, samples=sample_variables) if plan.changed("prompts") else self.prompts
        prompts.reload()
        for name in TEMPLATE_NAMES:  # a broken edit fails the reload, not the next mail
            prompts.load(name)
        llm = LLM(c.llm) if plan.changed("llm") else self.llm
        self.prompts, self.llm, self.rules, self.config = prompts, llm, Rules.from_config(c, LOOP_HEADER), c
        if plan.changed("smtp"):
            self.sender = SmtpSender(c.smtp)
        if self.db is not None:  # Delivery holds the SMTP and IMAP settings: rebuilt, or a rotated password is unused
            self.delivery = Delivery(c.smtp, c.imap, Outbox(self.db), self.sender, self.mailbox, self._db, self._imap)
        if self.store is not None:
            self.agent = Agent(c, llm, prompts, self.store, self.metrics.stage)
        if self.scheduler is not None:  # the next job run uses the new templates and model
            self.scheduler.use(llm, prompts)
        self.hold.clear("configuration reloaded")
        self._release_held = True  # the operator may have fixed the setup: held mail is tried at the next pass
        log.info("prompts reloaded: %s", ", ".join(prompts.load(n).version for n in TEMPLATE_NAMES))
        return plan
