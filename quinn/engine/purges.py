"""After a purge by email: the user's mail leaves Quinn's folders too, for a while after the purge.

The confirming mail is still in the watched folder while its purge runs, and the receipt's own copy may come
back later (smtp.copy_to_self), hence a window rather than one sweep.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from quinn.mailbox import ImapMailbox

log = logging.getLogger(__name__)

MAILBOX_PURGE_WINDOW_S = 600.0  # how long after a purge the user's late copies are still looked for


class MailboxPurges:
    """Purged users whose mail is still to leave the mailbox: until when (monotonic), and when confirmed."""

    def __init__(self, window_s: float = MAILBOX_PURGE_WINDOW_S) -> None:
        self.window_s = window_s
        self._pending: dict[str, tuple[float, datetime]] = {}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, user: str) -> None:
        """The purge receipt of ``user`` went out: their mail goes from the mailbox from the next pass on.
        To the microsecond: INTERNALDATE has whole seconds, and the confirming mail came in this very second."""
        self._pending[user] = (time.monotonic() + self.window_s, datetime.now(UTC))

    async def sweep(self, mailbox: ImapMailbox, own_address: str,
                    run_imap: Callable[..., Awaitable[Any]]) -> None:  # fmt: skip
        """Delete what each pending user sent and Quinn's replies to them from Quinn's folders (drafts are left
        to the person who reviews them); a user's window over, they are dropped."""
        now = time.monotonic()
        for user, (until, confirmed_at) in list(self._pending.items()):
            if now > until:
                del self._pending[user]
                continue
            removed = await run_imap(mailbox.purge_address, user, own_address, received_before=confirmed_at)
            if removed:
                log.info("purge: %d mails of the purged user deleted from the mailbox", removed)
