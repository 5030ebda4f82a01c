"""The watched folder as the daemon sees it across passes: its UIDVALIDITY (rows of a dead one superseded), when
Quinn first watched it (mail from before is the backlog, left alone: mailbox/backlog.py), and finished mail that
left it before a crash let the ledger say so."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from quinn.engine.parts import Parts
from quinn.mailbox import ANSWER_HINT, MailLedger, Watches, WatchMark
from quinn.scheduler import holder_is_dead

log = logging.getLogger(__name__)


class WatchedFolder:
    """``imap.folder`` of the parts' mailbox; ``run_db``/``run_imap`` put a call on the DB's and IMAP's thread."""

    def __init__(self, parts: Parts, run_db: Callable[..., Awaitable[Any]],
                 run_imap: Callable[..., Awaitable[Any]]) -> None:  # fmt: skip
        self.parts = parts
        self._db = run_db
        self._imap = run_imap
        self._mark: WatchMark | None = None  # from which UID on the folder is answered (the backlog rule)
        self._backlog_said: int | None = None  # the backlog size last logged

    async def to_handle(self, listed: list[int], holder: str) -> list[int]:
        """Of every UID the folder holds now, those to handle this pass; finished mail gone from it is settled
        (but not a mail another daemon is filing: ``holder`` is this daemon's lease name)."""
        p = self.parts
        assert p.store is not None
        settled = await self._db(MailLedger(p.store.db).settle_moved, p.config.imap.folder, p.mailbox.uidvalidity,
                                 listed, holder=holder, now=p.clock.now(), dead=holder_is_dead)  # fmt: skip
        if settled:
            log.info("%d finished mails had left %s before a crash let the ledger say so", settled,
                     p.config.imap.folder)  # fmt: skip
        return await self.skip_backlog(listed)

    async def resync(self) -> None:
        """After (re)connecting: ledger rows of another UIDVALIDITY that never finished are superseded."""
        p = self.parts
        assert p.store is not None
        folder, validity = p.config.imap.folder, p.mailbox.uidvalidity
        stale = await self._db(MailLedger(p.store.db).resync, folder, validity)
        if stale:
            log.warning("UIDVALIDITY of %s is now %d: %d unfinished mails will be taken up again by Message-ID",
                        folder, validity, stale)  # fmt: skip
        await self.watch()

    async def watch(self) -> None:
        """Record when Quinn first watched the folder (under this UIDVALIDITY): mail from before is the backlog."""
        assert self.parts.store is not None
        c = self.parts.config.imap
        uidnext = await self._imap(self.parts.mailbox.uidnext)
        mark, why = await self._db(Watches(self.parts.store.db).watch, c.folder, self.parts.mailbox.uidvalidity,
                                   uidnext, c.backlog == "answer")  # fmt: skip
        if why is not None:
            log.info("watching %s from uid %d (uidvalidity %d): %s", c.folder, mark.first_uid, mark.uidvalidity, why)
        self._mark = mark

    async def skip_backlog(self, uids: list[int]) -> list[int]:
        """The UIDs to handle: the backlog (mail from before the first watch) stays in the folder, untouched."""
        assert self.parts.store is not None
        if self._mark is None or self._mark.uidvalidity != self.parts.mailbox.uidvalidity:
            await self.watch()
        assert self._mark is not None
        waiting = self._mark.waiting(uids)
        if len(waiting) != self._mark.skipped:
            await self._db(Watches(self.parts.store.db).count_skipped, self._mark.folder, len(waiting))
            self._mark = await self._db(Watches(self.parts.store.db).get, self._mark.folder)
        if waiting and len(waiting) != self._backlog_said:
            assert self._mark is not None
            log.info("%d mails in %s arrived before Quinn first watched it (%s) and are left alone; %s",
                     len(waiting), self._mark.folder, self._mark.watched_at, ANSWER_HINT)  # fmt: skip
        self._backlog_said = len(waiting)
        return [uid for uid in uids if uid >= self._mark.first_uid]
