"""Quinn: the daemon's loop. Built from a Config through the composition root (``quinn.engine.parts``), it
keeps the IMAP connection alive and feeds each mail of the watched folder to the mail engine
(``quinn.engine.mail``), which takes it along the state machine of ``quinn.engine.states``; after each pass it
sends the digests, finishes the drafts a reviewer decided on and sweeps purged users' mail. SIGHUP's ``reload``
rebuilds the parts a new config changes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from quinn import confined
from quinn.agent import LLM, TEMPLATE_NAMES, Agent, Answer, PromptStore
from quinn.clock import Clock
from quinn.config import Config
from quinn.confined import ChildFailed
from quinn.db import Database
from quinn.engine.conversation import Asked, Conversation
from quinn.engine.digests import send_digests
from quinn.engine.flight import Flight
from quinn.engine.folder import WatchedFolder
from quinn.engine.mail import MailHandler
from quinn.engine.parts import Parts
from quinn.engine.purges import MailboxPurges
from quinn.engine.reviews import finish_reviewed
from quinn.errors import ConnectError, QuinnError
from quinn.hold import HELD_PREFIX, SetupHold
from quinn.logs import set_level
from quinn.mailbox import (
    IMAP_FAILURES,
    Backoff,
    Delivery,
    HostUnknown,
    ImapLoginRejected,
    ImapMailbox,
    InboundEmail,
    MailLedger,
    trust_warnings,
)
from quinn.memory import Memory, MemoryStore
from quinn.metrics import Metrics
from quinn.reload import ReloadPlan
from quinn.scheduler import JobRunner

__all__ = ["Asked", "Quinn"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

BACKOFF_START_S = 1.0
LOGIN_RETRY_MAX_S = 3600.0


class Quinn:
    """The daemon: owns the IMAP connection's thread and the loop; the parts live in ``self.parts``."""

    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.metrics = Metrics()
        # A broken template is a startup error, not a failure on the first mail: Parts.build loads them all.
        self.parts = Parts.build(config, clock, self.metrics.stage)
        self.hold = SetupHold()
        self.purges = MailboxPurges()
        self.conversation = Conversation(self.parts, self.metrics, self._db, self.purges)
        self.mail = MailHandler(self.parts, self.conversation, self.hold, self.metrics, self._db, self._imap)
        self._imap_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="quinn-imap")
        self._stop = threading.Event()
        self.folder = WatchedFolder(self.parts, self._db, self._imap)

    # The parts, as the CLI and the tests name them.
    config = property(lambda self: self.parts.config)
    clock = property(lambda self: self.parts.clock)
    prompts: PromptStore = property(lambda self: self.parts.prompts)  # type: ignore[assignment]
    llm: LLM = property(lambda self: self.parts.llm)  # type: ignore[assignment]
    mailbox: ImapMailbox = property(lambda self: self.parts.mailbox)  # type: ignore[assignment]
    db: Database | None = property(lambda self: self.parts.db)  # type: ignore[assignment]
    store: MemoryStore | None = property(lambda self: self.parts.store)  # type: ignore[assignment]
    agent: Agent | None = property(lambda self: self.parts.agent)  # type: ignore[assignment]
    scheduler: JobRunner | None = property(lambda self: self.parts.scheduler)  # type: ignore[assignment]
    delivery: Delivery | None = property(lambda self: self.parts.delivery)  # type: ignore[assignment]
    handled = property(lambda self: self.mail.handled)

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Log in to IMAP, open the database, load the embedder. A rejected login or a bad database is fatal
        and explained; an unreachable IMAP server is not (the run loop keeps trying, saying so)."""
        c = self.config
        for warning in trust_warnings(self.parts.rules):  # said at every start, loudly: the operator must not miss it
            log.warning("%s", warning)
        # Cheapest and likeliest mistakes first: the IMAP login, then the database, then the slow model load.
        try:
            await self._imap(self.mailbox.connect)
        except HostUnknown:
            raise  # a typo in the config, not an outage: quinn run exits with it (systemd retries later)
        except ConnectError as exc:
            log.error("%s; will keep trying", exc)
        except ImapLoginRejected as exc:
            if c.imap.auth != "oauth2":
                raise
            # A token is fixed by `quinn auth login` while the daemon runs (it re-reads the token file), so a
            # refused or missing token holds mail as a refused login does while running, instead of exiting.
            log.error("%s; mail waits, and the login is tried again every %.0fs", exc, c.imap.login_retry_s)
        await self.open_memory()
        await self.parts.start_scheduler()
        self.parts.connect_delivery(self._db, self._imap)
        if self.mailbox.connected:
            await self.folder.resync()
        try:  # the parsing children's fork server, before the first mail is read (quinn/confined.py)
            await asyncio.to_thread(confined.warm)
        except ChildFailed as exc:
            log.warning("the parser's fork server did not start (%s); the first mail starts it", exc)
        mode = ("IDLE" if self.mailbox.can_idle else "polling") if self.mailbox.connected else "not connected yet"
        log.info("quinn started: %s, folder %s, uidvalidity %s, %s", self.mailbox.where, c.imap.folder,
                 self.mailbox.uidvalidity, mode)  # fmt: skip

    async def open_memory(self) -> None:
        """Open the database and load the embedder, and build the agent on them (``start``, and ``quinn ask``,
        which needs no mailbox)."""
        await self.parts.open_memory()

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
        await self.parts.close()

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
                        await self.folder.resync()
                    await self.process_folder()
                    if self._stop.is_set():
                        break
                    await self._imap(self.mailbox.wait, await self._wait_s(), self._stop)
                except ImapLoginRejected as exc:
                    delay = login_backoff.next_delay()
                    log.error("IMAP login rejected while running (%s); %s, trying again in %.0fs", exc,
                              "mail waits until then" if c.auth == "oauth2" else "the server may be changing passwords",
                              delay)  # fmt: skip
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
            wait_s = min(wait_s, max((due - self.clock.now()).total_seconds() + 1, 0.0))
        return wait_s

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
            await self.folder.resync()
        if self.mail.release_held:
            self.mail.release_held = False
            assert self.store is not None
            released = await self._db(MailLedger(self.store.db).release, HELD_PREFIX)
            if released:
                log.info("%d mails held for a setup error are tried again now", released)
        await self.mail.learn_pending()  # what a crash left between a reply and its learning
        uids = await self.folder.to_handle(await self._imap(self.mailbox.uids), self.mail.holder)
        sizes = await self._imap(self.mailbox.sizes, uids)
        flight = Flight(self.config.service.mails_in_flight)
        try:
            for uid in uids:
                if self._stop.is_set():
                    break
                if uid in sizes:
                    await self.mail.take(uid, sizes[uid], flight)
        finally:
            await flight.wait()  # the mails in flight finish (or, cancelled, resume at the next start)
        if self.purges:
            await self.purges.sweep(self.mailbox, self.config.smtp.from_address, self._imap)
        await send_digests(self.parts, self.hold, self._db, self.mail.holder)
        await finish_reviewed(self.parts, self.hold, self._db, self.mail.holder)  # drafts approved or discarded
        return len(uids)

    @property
    def handling(self) -> int | None:
        """A UID in hand (the lowest), learning included, or None (`quinn demo` waits for it)."""
        return min(self.mail.in_hand, default=None)

    async def handle(self, uid: int, size: int) -> None:
        """Take one message as far as it can go now (``MailHandler.handle``)."""
        await self.mail.handle(uid, size)

    async def ask(self, email: InboundEmail, on_reply: Callable[[Answer, list[Memory]], object] | None = None) -> Asked:
        """``quinn ask``: one message answered on the daemon's path, nothing sent (``Conversation.ask``)."""
        return await self.conversation.ask(email, on_reply)

    def reload(self, new: Config | None = None) -> ReloadPlan:
        """SIGHUP: apply the reloadable part of ``new`` (default: the current config) and re-read the templates.

        Raises ``QuinnError`` (and changes nothing) when the new templates or model settings do not work.
        """
        plan = self.parts.reload(new or self.config)
        set_level(plan.config.log_level)
        self.hold.clear("configuration reloaded")
        self.mail.release_held = True  # the operator may have fixed the setup: held mail is tried at the next pass
        log.info("prompts reloaded: %s", ", ".join(self.prompts.load(n).version for n in TEMPLATE_NAMES))
        return plan
