"""Delivering an outbox item exactly once: over SMTP, or as a draft APPENDed to the drafts folder.

The window no protocol closes: SMTP has no idempotent submit, so a crash after the server accepted the message
(RFC 5321 §4.1.1.4: the 250 after DATA) and before the outbox says ``sent`` leaves us not knowing. Therefore a
try is recorded as ``sending`` before the message leaves, and every reply is Bcc'd to Quinn's own address
(``smtp.copy_to_self``): the server accepts a message for all its recipients or for none, so the copy in our own
mailbox is proof of delivery. An item found ``sending`` is resent only when no copy with its Message-ID and its body is
in INBOX, the watched folder or the sent folder (a Message-ID alone anyone can write). Drafts are checked the
same way in the drafts folder.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from quinn.config import ImapConfig, SmtpConfig
from quinn.errors import ConfigError, ConnectError, RetryLater
from quinn.faults import fault_point
from quinn.mailbox.backoff import Backoff
from quinn.mailbox.imap import ImapMailbox
from quinn.mailbox.outbox import Outbox, OutboxItem, carries_raw
from quinn.mailbox.smtp import MaybeSent, SmtpSender

log = logging.getLogger(__name__)

Runner = Callable[..., Awaitable[Any]]
#: The ledger state a delivered outbox item gives its mail.
LEDGER_STATE = {"sent": "replied", "drafted": "drafted"}


class Delivery:
    """Sends (or drafts) outbox items; ``run_db`` and ``run_imap`` run a call on the DB and IMAP threads."""

    def __init__(
        self, smtp: SmtpConfig, imap: ImapConfig, outbox: Outbox, sender: SmtpSender, mailbox: ImapMailbox,
        run_db: Runner, run_imap: Runner,
    ) -> None:  # fmt: skip
        self.smtp = smtp
        self.imap = imap
        self.outbox = outbox
        self.sender = sender
        self.mailbox = mailbox
        self._db = run_db
        self._imap = run_imap

    async def deliver(self, item: OutboxItem, *, draft: bool | None = None) -> str:
        """Deliver ``item`` unless it already was; returns the mail's ledger state (``replied`` or ``drafted``).
        ``draft``: APPEND it as a draft; by default as ``smtp.reply_mode`` says (an approved draft is sent).

        Raises ``RetryLater`` when the server keeps failing temporarily (the item waits, still marked so the
        next try checks first), ``ConnectError`` when it refused the message for good (the item is ``failed``),
        and IMAP errors from draft mode to the run loop, which reconnects.
        """
        if item.state in LEDGER_STATE:
            return LEDGER_STATE[item.state]
        if draft is None:
            draft = self.smtp.reply_mode == "draft"
        tries = 1 if draft else self.smtp.send_attempts
        backoff = Backoff(self.smtp.retry_delay_s, self.smtp.retry_delay_s * 2 ** (tries - 1))
        for attempt in range(1, tries + 1):
            if item.in_flight and await self._arrived(item):
                done = "sent" if item.state == "sending" else "drafted"
                log.info("reply %s: a copy is in the mailbox, so the interrupted try delivered it; not resending",
                         item.message_id)  # fmt: skip
                await self._db(self.outbox.mark, item.message_id, done)
                await self._file_copy(item, draft)
                return LEDGER_STATE[done]
            fault_point("before_send")
            try:
                if draft:
                    item = await self._db(self.outbox.begin, item.message_id, "drafting")
                    await self._imap(self.mailbox.append, self.imap.drafts_folder, item.raw, (b"\\Draft",))
                else:
                    item = await self._db(self.outbox.begin, item.message_id, "sending")
                    await self.sender.send(item.raw, self.smtp.from_address, self._envelope(item))
            except RetryLater as exc:
                if not isinstance(exc, MaybeSent):  # certainly not delivered: back to pending
                    item = await self._db(self.outbox.mark, item.message_id, "pending", exc.message)
                if attempt == tries:
                    raise
                delay = backoff.next_delay()
                log.warning("reply %s: try %d of %d failed (%s); again in %.1fs", item.message_id, attempt, tries,
                            exc.message, delay)  # fmt: skip
                await asyncio.sleep(delay)
                continue
            except ConnectError as exc:
                await self._db(self.outbox.mark, item.message_id, "failed", exc.message)
                raise
            except ConfigError as exc:  # refused login: not sent; the reply waits, pending, for the fix
                await self._db(self.outbox.mark, item.message_id, "pending", exc.message)
                raise
            fault_point("after_send")
            done = "drafted" if draft else "sent"
            await self._db(self.outbox.mark, item.message_id, done)
            await self._file_copy(item, draft)
            return LEDGER_STATE[done]
        raise AssertionError("unreachable: the last try returns or raises")

    async def remove_draft(self, message_id: str) -> int:
        """A reviewed draft (sent or discarded) leaves the drafts folder; returns how many copies went."""
        return int(await self._imap(self.mailbox.remove_message_id, message_id, self.imap.drafts_folder))

    async def _file_copy(self, item: OutboxItem, draft: bool) -> None:
        """File our copy of a sent reply at once when it is already there (a local server delivers it before
        it answers), so the watched folder shows people's mail only. A copy that comes later is recognised
        and filed by the pipeline."""
        if not draft and self.smtp.copy_to_self:
            await self._imap(self.mailbox.file_copies, item.message_id, self.imap.sent_folder, self._carries(item))

    def _envelope(self, item: OutboxItem) -> list[str]:
        """The reply's recipients, plus Quinn itself (Bcc: only in the envelope) for the proof copy."""
        own = self.smtp.from_address
        if self.smtp.copy_to_self and own not in {r.lower() for r in item.recipients}:
            return [*item.recipients, own]
        return list(item.recipients)

    async def _arrived(self, item: OutboxItem) -> bool:
        """Whether an interrupted try delivered ``item``: its copy (or draft) is in our mailbox."""
        if item.state == "drafting":
            drafts = [self.imap.drafts_folder]
            return bool(await self._imap(self.mailbox.holds_message_id, item.message_id, drafts, self._carries(item)))
        if not self.smtp.copy_to_self:
            log.warning("reply %s was interrupted during SMTP and smtp.copy_to_self is off, so whether it arrived "
                        "cannot be checked: sending again (same Message-ID, so mail clients can drop a duplicate)",
                        item.message_id)  # fmt: skip
            return False
        folders = [*self.mailbox.copy_folders(), self.imap.sent_folder]
        return bool(await self._imap(self.mailbox.holds_message_id, item.message_id, folders, self._carries(item)))

    @staticmethod
    def _carries(item: OutboxItem) -> Callable[[bytes], bool]:
        """Which mail with ``item``'s Message-ID is its copy: the one holding its body (``outbox.carries_raw``).
        Reply ids follow from the mail answered, so a stranger can write one; a forged "copy" must not stop a
        reply or be filed out of the pipeline's sight."""
        return functools.partial(carries_raw, item.raw)
