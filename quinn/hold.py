"""Holding mail while the setup is broken: a revoked API key, an unknown model or a refused SMTP login is not the
mail's fault.

When the reply path raises a ``ConfigError`` (the provider said 401/403/404, an embeddings endpoint refused the
key, the SMTP server refused Quinn's login with a 5xx), every mail would fail the same way. A reply written before
the SMTP login failed waits in the outbox, pending, and is sent as it is once the hold ends. So the daemon keeps
running, says what is wrong once (with the hint), and holds mail: each mail is deferred without counting an attempt
(it can never end up ``failed`` over this), and while the hold lasts no further model call is made for new mail.
When the hold's time comes, the next mail is the probe: its success ends the hold, its failure extends it
(doubling, with jitter, up to an hour). A restart or SIGHUP, the two ways an operator applies a fix, end the hold
at once and release the held mail.

Held mail is recognisable in the ledger by the ``HELD_PREFIX`` of its reason, so a restart finds it too.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from quinn.errors import QuinnError
from quinn.mailbox import Backoff

log = logging.getLogger(__name__)

HELD_PREFIX = "held until the setup is fixed: "
HOLD_START_S = 60.0
HOLD_MAX_S = 3600.0


class SetupHold:
    """The daemon's memory of a setup error that stops every reply; see the module docstring."""

    def __init__(self, start_s: float = HOLD_START_S, max_s: float = HOLD_MAX_S) -> None:
        self._backoff = Backoff(start_s, max_s)
        self.error: QuinnError | None = None
        self.until: datetime | None = None
        self.held = 0  # mails deferred by this hold

    def active(self, now: datetime) -> bool:
        """True while mail must wait without trying the model (the probe time has not come)."""
        return self.until is not None and now < self.until

    @property
    def reason(self) -> str:
        """The ledger reason of a held mail: the prefix, then the error and its hint."""
        return f"{HELD_PREFIX}{self.error}"

    def fail(self, error: QuinnError, now: datetime) -> datetime:
        """A setup error on the model path: hold (or keep holding) mail; returns until when.

        The first error of a hold is logged as an error with its hint; a failed probe only says the hold goes on.
        """
        first = self.error is None
        self.error = error
        self.until = now + timedelta(seconds=self._backoff.next_delay())
        if first:
            log.error("%s; mail is held (deferred, not failed) until this is fixed: restart or reload (SIGHUP) "
                      "after fixing it; next try at %s", error, self.until.isoformat(timespec="seconds"))  # fmt: skip
        else:
            log.warning("the setup error persists (%s); mail stays held until %s", error.message,
                        self.until.isoformat(timespec="seconds"))  # fmt: skip
        return self.until

    def hold(self) -> None:
        """Count one more mail held."""
        self.held += 1

    def clear(self, why: str) -> bool:
        """End the hold (a reply went through, or the operator reloaded); returns whether one was on."""
        was_on = self.error is not None
        if was_on:
            log.info("setup error cleared (%s): %d held mails are taken up again", why, self.held)
        self.error = None
        self.until = None
        self.held = 0
        self._backoff.reset()
        return was_on
