"""Sending the digests the digest job planned (quinn.agent.digest): after each folder pass, through the outbox,
as replies go: sent exactly once, a copy filed. One the server will not take now waits for the next pass.
With several daemons on one database, one of them at a time does this (the lease ``digests``, in the scheduler's
``leases`` table): two daemons never compose nor deliver the same digest."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from quinn.agent import digest
from quinn.engine.leading import lead
from quinn.engine.parts import Parts
from quinn.errors import ConfigError, ConnectError, RetryLater
from quinn.hold import SetupHold
from quinn.mailbox import Outbox

log = logging.getLogger(__name__)

LEASE = "digests"


async def send_digests(parts: Parts, hold: SetupHold, run_db: Callable[..., Awaitable[Any]], holder: str) -> None:
    """Under the lease ``digests`` (``holder``: this daemon), compose and deliver the planned digests; when another
    daemon holds it, it is doing this now and this daemon does nothing."""
    leases = await lead(parts, run_db, holder, LEASE)
    if leases is None:
        return
    try:
        await _send(parts, hold, run_db)
    finally:
        await run_db(leases.release, LEASE)


async def _send(parts: Parts, hold: SetupHold, run_db: Callable[..., Awaitable[Any]]) -> None:
    """Compose every planned digest into the outbox, then deliver what waits there (unless a setup error holds
    the mail: digests wait for the fix too)."""
    store, delivery = parts.store, parts.delivery
    assert store is not None and delivery is not None
    c = parts.config.smtp
    outbox = Outbox(store.db)
    for planned in await run_db(digest.unsent, store.db):
        made = await run_db(digest.compose, store, planned, own_address=c.from_address, own_name=c.from_name,
                            now=parts.clock.now())  # fmt: skip
        if made is not None:
            mail, listed = made
            await run_db(outbox.put, mail.message_id, "", planned.user_id, None, mail.recipients, mail.raw,
                         template=digest.TEMPLATE)  # fmt: skip
            await run_db(digest.composed, store.db, planned.id, mail.message_id, listed)
    if hold.active(parts.clock.now()):
        return
    for item in await run_db(outbox.pending, digest.TEMPLATE):
        try:
            await delivery.deliver(item)
            log.info("digest %s sent to %s", item.message_id, item.user_id)
        except RetryLater as exc:
            log.warning("digest %s not sent yet (%s); trying again after the next pass", item.message_id,
                        exc.message)  # fmt: skip
            return  # the server is struggling: the others wait too
        except ConnectError as exc:  # refused for good: marked failed in the outbox, never tried again
            log.error("digest %s refused by the SMTP server: %s", item.message_id, exc.message)
        except ConfigError as exc:  # the login was refused: every mail waits for the operator (logged)
            hold.fail(exc, parts.clock.now())
            return
