"""The lab's one waiter: poll a check until it holds or time runs out (issue 17).

Tests, the benchmarks and the lab's own servers wait for things they cannot be told about: a reply in a mailbox,
a line in a daemon's log, a row in its database. Each used to have its own deadline loop, and each failed in its
own words (or not at all). `wait_for` is that loop once: it returns what the check found, and on time-out says
what it waited for, for how long, and (given a ``log``) the end of the log that explains why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

LOG_TAIL_CHARS = 4000


class WaitTimeout(TimeoutError, AssertionError):
    """A wait that ran out of time. A `TimeoutError` for the lab's callers (``quinn demo``, the benchmarks), and
    an `AssertionError`, so a test that times out reads as a failed test rather than a crashed one."""


def wait_for(
    check: Callable[[], T | None],
    what: str,
    timeout_s: float = 60.0,
    interval_s: float = 0.1,
    log: Callable[[], str] | None = None,
    retry_on: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``check`` every ``interval_s`` until it returns something truthy, and return that.

    ``check`` runs at least once, and once more at the deadline. An exception it raises ends the wait (raise one
    when waiting is hopeless, e.g. the process died), except those of ``retry_on``, which count as "not yet"
    (a server not listening yet) and are named in the time-out. After ``timeout_s`` raises `WaitTimeout` naming
    ``what`` and the time waited, with the last `LOG_TAIL_CHARS` of ``log()`` when given.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            result = check()
        except retry_on as exc:
            last_error = exc
        else:
            if result:
                return result
        now = time.monotonic()
        if now >= deadline:
            raise timed_out(what, now - started, last_error, log)
        time.sleep(min(interval_s, deadline - now))


async def wait_for_async(
    check: Callable[[], T | None],
    what: str,
    timeout_s: float = 60.0,
    interval_s: float = 0.1,
    log: Callable[[], str] | None = None,
) -> T:
    """`wait_for` inside an event loop: sleeps with ``asyncio.sleep``, so the loop's own tasks (the ones being
    waited for) go on meanwhile."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        result = check()
        if result:
            return result
        now = time.monotonic()
        if now >= deadline:
            raise timed_out(what, now - started, None, log)
        await asyncio.sleep(min(interval_s, deadline - now))


def timed_out(what: str, waited_s: float, last_error: Exception | None, log: Callable[[], str] | None) -> WaitTimeout:
    """The error of a wait that ran out: what, how long, the last error retried, the log's tail."""
    message = f"not reached after {waited_s:.1f} s: {what}"
    if last_error is not None:
        message += f" (last error: {last_error!r})"
    if log is not None:
        message += f"\n--- log ---\n{log()[-LOG_TAIL_CHARS:]}"
    return WaitTimeout(message)
