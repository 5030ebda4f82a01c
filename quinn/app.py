"""Quinn: the one app object. Built from a Config; the only place where mailbox, agent and memory meet.

One email's path reads top to bottom in ``Quinn.handle``: ledger → size → fetch → parse → policy → session →
context → reply (outbox first) → send → file away → extract memories. Every step is idempotent on
(folder, UIDVALIDITY, UID), so after a crash the daemon resumes where the database says it was.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from quinn.agent.context import ThreadMessage
from quinn.agent.llm import LLM
from quinn.agent.memory_mail import NO_LEARNING_TEMPLATES, PURGE_CONFIRM_TEMPLATE
from quinn.agent.prompts import TEMPLATE_NAMES, PromptStore
from quinn.agent.respond import Agent
from quinn.agent.samples import sample_variables
from quinn.clock import Clock, iso, utcnow
from quinn.config import Config
from quinn.errors import ConnectError, MailParseError, QuinnError, RetryLater
from quinn.hardening import fit_torch_to_sandbox
from quinn.mailbox.imap import DEAD_CONNECTION, ImapLoginRejected, ImapMailbox
from quinn.mailbox.ledger import MailKey, MailLedger
from quinn.mailbox.message import InboundEmail
from quinn.mailbox.outbox import Outbox
from quinn.mailbox.parse import parse_email
from quinn.mailbox.policy import Decision, Rules, decide
from quinn.mailbox.smtp import LOOP_HEADER, SmtpSender, compose_reply, reply_message_id
from quinn.mailbox.threads import Sessions
from quinn.memory.db import Database
from quinn.memory.embed import build_embedder
from quinn.memory.store import MemoryStore
from quinn.metrics import Metrics
from quinn.reload import ReloadPlan, plan_reload
from quinn.scheduler.context import JobContext
from quinn.scheduler.runner import JobRunner
from quinn.scheduler.summarize import reply_with_summary, wants_summary

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 300.0
LOGIN_RETRY_S = 120.0
LLM_RETRY_BASE = timedelta(minutes=1)
LLM_RETRY_MAX = timedelta(hours=1)
MAX_ATTEMPTS = 12


class Quinn:
    """The daemon: owns the mailbox, the store, the agent and the scheduler."""

    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.prompts = PromptStore(config.prompts.dir, samples=sample_variables)
        for name in TEMPLATE_NAMES:  # a broken template is a startup error, not a failure on the first mail
            self.prompts.load(name)
        self.rules = _rules(config)
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
        self.metrics = Metrics()

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the database, load the embedder and log in to IMAP. Errors here are fatal and explained."""
        c = self.config
        # Cheapest and likeliest mistakes first: the IMAP login, then the database, then the slow model load.
        await self._imap(self.mailbox.connect)
        self.db = Database.open(c.database.url, c.database.secret("auth_token"))
        if c.embeddings.backend == "local":
            fit_torch_to_sandbox()  # under MemoryDenyWriteExecute=yes torch's JIT kernels would fail
        embedder = await asyncio.to_thread(
            build_embedder, c.embeddings.backend, c.embeddings.model, c.embeddings.base_url,
            c.embeddings.secret("api_key"), c.embeddings.dimensions,
        )  # fmt: skip
        self.store = MemoryStore(self.db, embedder)
        self.agent = Agent(c, self.llm, self.prompts, self.store)
        if c.scheduler.enabled:
            self.scheduler = JobRunner(self.store, self.llm, self.prompts, c.scheduler, clock=self.clock)
            await self.scheduler.start()
        log.info("quinn started: %s, folder %s, uidvalidity %s, %s", self.mailbox.where, c.imap.folder,
                 self.mailbox.uidvalidity, "IDLE" if self.mailbox.can_idle else "polling")  # fmt: skip

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

        ``on_ready`` is called once everything is up (systemd's READY=1 and the metrics endpoint hang on it).
        """
        await self.start()
        if on_ready is not None:
            on_ready()
        backoff = BACKOFF_START_S
        try:
            while not self._stop.is_set():
                try:
                    await self.process_folder()
                    backoff = BACKOFF_START_S
                    if self._stop.is_set():
                        break
                    await self._imap(self.mailbox.wait, self.config.imap.poll_interval_s, self._stop)
                except DEAD_CONNECTION as exc:
                    backoff = await self._reconnect(f"{exc.__class__.__name__}: {exc}", backoff)
                except ConnectError as exc:
                    backoff = await self._reconnect(str(exc), backoff)
        finally:
            await self.close()
        log.info("quinn stopped after handling %d mails", self.handled)

    async def _reconnect(self, why: str, backoff: float) -> float:
        """Log, wait with jittered exponential backoff, reconnect; a rejected login is retried slowly."""
        delay = backoff * (0.5 + random.random())
        log.warning("IMAP connection lost (%s); reconnecting in %.1fs", why, delay)
        await self._imap(self.mailbox.close)
        await asyncio.to_thread(self._stop.wait, delay)
        if self._stop.is_set():
            return backoff
        try:
            await self._imap(self.mailbox.connect)
            log.info("IMAP reconnected to %s", self.mailbox.where)
            return BACKOFF_START_S
        except ImapLoginRejected as exc:
            log.error("IMAP login rejected on reconnect, retrying in %.0fs: %s", LOGIN_RETRY_S, exc)
            await asyncio.to_thread(self._stop.wait, LOGIN_RETRY_S)
        except (ConnectError, *DEAD_CONNECTION) as exc:
            log.warning("IMAP reconnect failed: %s", exc)
        return min(backoff * 2, BACKOFF_MAX_S)

    async def _imap(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._imap_thread, lambda: fn(*args, **kwargs))

    async def _db(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        assert self.db is not None
        return await self.db.run(fn, *args, **kwargs)

    # -- one folder pass -------------------------------------------------------------------------------

    async def process_folder(self) -> int:
        """Handle every message in the watched folder once; returns how many were looked at."""
        uids = await self._imap(self.mailbox.uids)
        sizes = await self._imap(self.mailbox.sizes, uids)
        for uid in uids:
            if self._stop.is_set():
                break
            if uid in sizes:
                with self.metrics.stage("mail"):
                    await self.handle(uid, sizes[uid])
        return len(uids)

    async def handle(self, uid: int, size: int) -> None:
        """Take one message as far as it can go now. Never raises for a problem with the mail itself."""
        assert self.store is not None
        key = MailKey(self.config.imap.folder, self.mailbox.uidvalidity, uid)
        ledger = MailLedger(self.store.db)
        record = await self._db(ledger.receive, key)
        if record.final:
            if not record.moved:
                await self._file_away(ledger, key, record.state)
            return
        if record.state == "deferred" and record.next_attempt_at and record.next_attempt_at > (iso(utcnow()) or ""):
            return
        limit_kb = self.config.imap.max_message_kb
        if size > limit_kb * 1024:
            await self._finish(ledger, key, "quarantined", f"too large: {size} bytes > {limit_kb} KiB")
            return
        with self.metrics.stage("fetch"):
            fetched = await self._imap(self.mailbox.fetch, uid)
        if fetched is None:
            return
        try:
            email = parse_email(fetched.raw, internal_date=fetched.internal_date,
                                max_bytes=self.config.imap.max_message_kb * 1024)  # fmt: skip
        except MailParseError as exc:
            await self._finish(ledger, key, "quarantined", f"unparseable: {exc.message}")
            return
        earlier = await self._db(ledger.done_elsewhere, email.message_id, key)
        if earlier is not None:
            await self._finish(ledger, key, "ignored", f"duplicate of {earlier.key.uid}: {earlier.state}",
                               message_id=email.message_id)  # fmt: skip
            return
        decision = decide(email, self.rules)
        log.info("mail uid=%s id=%s from=%s: %s (%s)", uid, email.message_id, email.sender, decision.action,
                 decision.reason)  # fmt: skip
        if decision.action != "handle":
            await self._finish(ledger, key, "ignored" if decision.action == "ignore" else "rejected",
                               decision.reason, message_id=email.message_id, user_id=decision.user_id)  # fmt: skip
            return
        assert decision.user_id is not None
        cap = self.config.policy.max_replies_per_sender_per_hour
        if await self._db(ledger.replies_since, decision.user_id, utcnow() - timedelta(hours=1)) >= cap:
            await self._db(ledger.defer, key, f"rate cap: {cap} replies per hour", timedelta(minutes=10))
            return
        await self._db(ledger.set, key, "handling", decision.reason, message_id=email.message_id,
                       user_id=decision.user_id)  # fmt: skip
        try:
            state = await self._reply(email, decision)
        except RetryLater as exc:
            attempts = (await self._db(ledger.get, key) or record).attempts + 1
            if attempts >= MAX_ATTEMPTS:
                await self._finish(ledger, key, "failed", f"gave up after {attempts} attempts: {exc.message}")
                return
            delay = min(LLM_RETRY_BASE * 2 ** (attempts - 1), LLM_RETRY_MAX)
            await self._db(ledger.defer, key, exc.message, delay)
            log.warning("mail uid=%s deferred (attempt %d, next in %s): %s", uid, attempts, delay, exc.message)
            return
        except ConnectError as exc:  # a permanent SMTP rejection: the operator must look
            await self._finish(ledger, key, "failed", exc.message)
            return
        await self._finish(ledger, key, state, decision.reason)
        self.handled += 1
        if decision.use_memory:
            await self._learn(decision.user_id, email)

    async def _finish(self, ledger: MailLedger, key: MailKey, state: str, reason: str, **ids: str | None) -> None:
        await self._db(ledger.set, key, state, reason, **ids)
        self.metrics.mail_finished(state)
        log.info("mail uid=%s -> %s: %s", key.uid, state, reason)
        await self._file_away(ledger, key, state)

    async def _file_away(self, ledger: MailLedger, key: MailKey, state: str) -> None:
        c = self.config.imap
        folder = c.quarantine_folder if state in ("quarantined", "failed") else c.processed_folder
        await self._imap(self.mailbox.file_away, key.uid, folder, answered=state in ("replied", "drafted"))
        await self._db(ledger.mark_moved, key)

    # -- the reply -------------------------------------------------------------------------------------

    async def _reply(self, email: InboundEmail, decision: Decision) -> str:
        """Write the reply to the outbox (once), deliver it, and keep it in the conversation. Returns the state."""
        assert self.store is not None and decision.user_id is not None
        db = self.store.db
        outbox = Outbox(db)
        sessions = Sessions(db)
        user = decision.user_id
        own = self.config.smtp.from_address
        message_id = reply_message_id(email.message_id, own)
        session_id = None
        if decision.use_memory:
            session_id = await self._db(sessions.assign, email, user)
            await self._db(sessions.store_inbound, session_id, user, email)
        item = await self._db(outbox.get, message_id)
        if item is None:
            assert self.agent is not None
            thread, summary = await self._db(self._thread, email, session_id)
            answer = None
            if session_id is not None and wants_summary(email.text):  # "summarize this and remember it"
                context = JobContext("summarize", self.store, self.llm, self.prompts, self.config.scheduler, self.clock)
                answer = await reply_with_summary(context, session_id)
            if answer is None:
                confirming = decision.use_memory and bool(await self._db(
                    outbox.ours_with_template, email.thread_ids, PURGE_CONFIRM_TEMPLATE, user))  # fmt: skip
                with self.metrics.llm_call(self.llm.model_id, "reply"):
                    answer = await self.agent.answer(email, user, decision.use_memory, thread=thread,
                                                     summary=summary, confirming_purge=confirming,
                                                     session_id=session_id)  # fmt: skip
            keep = decision.use_memory and not answer.purged  # after a purge, nothing about the user is stored
            # Cost is counted per sender even without memory; after a purge the user's name stays out of it.
            await self.agent.record(answer.template, answer.usage, None if answer.purged else user, email.message_id)
            files = [(a.filename, a.content_type, a.data) for a in answer.attachments]
            reply = compose_reply(email, answer.body, own_address=own, own_name=self.config.smtp.from_name,
                                  attachments=files)  # fmt: skip
            item = await self._db(outbox.put, reply.message_id, email.message_id, user if keep else None,
                                  session_id if keep else None, reply.recipients, reply.raw,
                                  template=answer.template, prompt_version=answer.prompt_version)  # fmt: skip
            if session_id is not None and keep:
                await self._db(sessions.store_outbound, session_id, user, reply.message_id, email.message_id,
                               reply.subject, own, reply.recipients, reply.body)  # fmt: skip
                await self._db(sessions.link, session_id, reply.message_id)
        if item.state in ("sent", "drafted"):
            return "replied" if item.state == "sent" else "drafted"
        if self.config.smtp.reply_mode == "draft":
            await self._imap(self.mailbox.append, self.config.imap.drafts_folder, item.raw, (b"\\Draft",))
            await self._db(outbox.mark, item.message_id, "drafted")
            return "drafted"
        try:
            with self.metrics.stage("send"):
                await self.sender.send(item.raw, own, item.recipients)
        except RetryLater as exc:
            await self._db(outbox.mark, item.message_id, "pending", exc.message)
            raise
        except ConnectError as exc:
            await self._db(outbox.mark, item.message_id, "failed", exc.message)
            raise
        await self._db(outbox.mark, item.message_id, "sent")
        return "replied"

    def _thread(self, email: InboundEmail, session_id: str | None) -> tuple[list[ThreadMessage], str | None]:
        """The thread buffer and rolling summary of the mail's session (runs on the DB thread)."""
        assert self.store is not None
        if session_id is None:
            return [], None
        sessions = Sessions(self.store.db)
        thread = [  # after a milestone summary: only the messages it does not cover
            ThreadMessage(m.from_addr, m.sent_at, m.body)
            for m in sessions.recent(session_id, limit=12)
            if m.message_id != email.message_id
        ]
        return thread, sessions.summary(session_id)

    async def _learn(self, user: str, email: InboundEmail) -> None:
        """Extract memories from the mail; a failure here never affects the reply already sent."""
        assert self.agent is not None and self.store is not None
        reply_id = reply_message_id(email.message_id, self.config.smtp.from_address)
        template = await self._db(Outbox(self.store.db).template_of, reply_id)
        if template in NO_LEARNING_TEMPLATES:  # a purge question or its answer: nothing may be learnt from it
            log.info("mail %s: no extraction after %s", email.message_id, template)
            return
        try:
            with self.metrics.llm_call(self.llm.background_model_id, "extract"):
                await self.agent.learn(user, email)
        except QuinnError as exc:
            log.warning("memory extraction for %s failed: %s", email.message_id, exc)

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
        self.prompts, self.llm, self.rules, self.config = prompts, llm, _rules(c), c
        if plan.changed("smtp"):
            self.sender = SmtpSender(c.smtp)
        if self.store is not None:
            self.agent = Agent(c, llm, prompts, self.store)
        log.info("prompts reloaded: %s", ", ".join(prompts.load(n).version for n in TEMPLATE_NAMES))
        return plan


def _rules(config: Config) -> Rules:
    """The reply policy's rules from the config."""
    return Rules(
        own_address=config.smtp.from_address,
        allow=tuple(config.policy.allow),
        aliases={k.lower(): [a.lower() for a in v] for k, v in config.policy.aliases.items()},
        require_authentication=config.policy.require_authentication,
        authserv_id=config.policy.authserv_id,
        unauthenticated=config.policy.unauthenticated,
        loop_header=LOOP_HEADER,
    )
