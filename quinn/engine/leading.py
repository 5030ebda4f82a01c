"""Work that one daemon does for all (digests, reviewed drafts): whoever holds the named lease does it now."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from quinn.engine.parts import Parts
from quinn.scheduler import Leases, holder_is_dead

log = logging.getLogger(__name__)


async def lead(parts: Parts, run_db: Callable[..., Awaitable[Any]], holder: str, name: str) -> Leases | None:
    """The leases, with ``name`` held by this daemon (``holder``), to release when done; None when another
    daemon holds it (it is doing the work now). A lease this daemon held before a crash is taken back at once."""
    store = parts.store
    assert store is not None
    leases = Leases(store.db, holder)
    now, lease_s = parts.clock.now(), parts.config.service.mail_lease_s
    held = await run_db(leases.acquire, name, now, lease_s)
    if held.holder == holder:
        return leases
    if holder_is_dead(held.holder) and await run_db(leases.take_over, name, held.holder, now, lease_s):
        return leases
    log.debug("%s: done by another daemon (%s) now", name, held.holder)
    return None
