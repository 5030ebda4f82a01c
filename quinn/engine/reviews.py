"""Finishing the drafts a reviewer decided on (draft mode, the console's Mail page or ``quinn mail drafts``): after
each folder pass, an approved draft is sent over SMTP as any reply is (exactly once, a copy filed), its mail's
ledger row goes from ``drafted`` to ``replied``, and the draft leaves the drafts folder; a discarded one only
leaves the drafts folder. The console never sends: it records the decision in the outbox and this sends it. With
several daemons on one database one of them at a time does this (the lease ``reviewed-drafts``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from quinn.engine.leading import lead
from quinn.engine.parts import Parts
from quinn.engine.states import check
from quinn.errors import ConfigError, ConnectError, RetryLater
from quinn.hold import SetupHold
from quinn.mailbox import MailLedger, Outbox

log = logging.getLogger(__name__)

LEASE = "reviewed-drafts"


async def finish_reviewed(parts: Parts, hold: SetupHold, run_db: Callable[..., Awaitable[Any]], holder: str) -> None:
    """Under the lease ``reviewed-drafts`` (``holder``: this daemon), send the approved drafts and remove the
    reviewed ones from the drafts folder; when another daemon holds the lease, it is doing this now."""
    store = parts.store
    assert store is not None
    outbox = Outbox(store.db)
    if not await run_db(outbox.reviewed_work):  # the usual pass: nothing decided, so no lease is written
        return
    leases = await lead(parts, run_db, holder, LEASE)
    if leases is None:
        return
    try:
        await _send_approved(parts, hold, run_db)
        await _remove_drafts(parts, run_db)
    finally:
        await run_db(leases.release, LEASE)


async def _send_approved(parts: Parts, hold: SetupHold, run_db: Callable[..., Awaitable[Any]]) -> None:
    """Send every approved draft over SMTP, whatever ``reply_mode`` says now; its mail becomes ``replied``."""
    store, delivery = parts.store, parts.delivery
    assert store is not None and delivery is not None
    if hold.active(parts.clock.now()):
        return
    outbox, ledger = Outbox(store.db), MailLedger(store.db)
    for item in await run_db(outbox.to_send_reviewed):
        try:
            await delivery.deliver(item, draft=False)
        except RetryLater as exc:
            log.warning("approved draft %s not sent yet (%s); trying again after the next pass", item.message_id,
                        exc.message)  # fmt: skip
            return  # the server is struggling: the others wait too
        except ConnectError as exc:  # refused for good: failed in the outbox (the Mail page shows it), kept
            log.error("approved draft %s refused by the SMTP server: %s", item.message_id, exc.message)
            continue
        except ConfigError as exc:  # the login was refused: every mail waits for the operator (logged)
            hold.fail(exc, parts.clock.now())
            return
        log.info("approved draft %s sent to %s", item.message_id, ", ".join(item.recipients))
        if item.in_reply_to:  # a digest answers no mail
            await run_db(_replied, ledger, item.in_reply_to, item.message_id)


def _replied(ledger: MailLedger, in_reply_to: str, message_id: str) -> None:
    """The drafted mail's ledger row, now that its approved reply went: ``replied``."""
    for entry in ledger.listing(message_id=in_reply_to):
        if entry.record.state == "drafted":
            ledger.set(entry.record.key, check("drafted", "replied"), f"draft approved and sent ({message_id})")


async def _remove_drafts(parts: Parts, run_db: Callable[..., Awaitable[Any]]) -> None:
    """Best effort: each reviewed draft leaves the drafts folder. An IMAP failure leaves it for the next pass
    (the run loop reconnects); a draft no longer there (the reviewer deleted it) counts as removed."""
    store, delivery = parts.store, parts.delivery
    assert store is not None and delivery is not None
    outbox = Outbox(store.db)
    for message_id in await run_db(outbox.drafts_to_remove):
        removed = await delivery.remove_draft(message_id)
        await run_db(outbox.draft_removed, message_id)
        log.info("reviewed draft %s: %d copies removed from %s", message_id, removed,
                 parts.config.imap.drafts_folder)  # fmt: skip
