"""Exponential backoff with jitter, for reconnects and retries.

Jitter spreads the retries of many daemons (or many mails) that failed at the same moment, so a server that
comes back is not hit by all of them at once.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays that double from ``start_s`` up to ``max_s``, each scaled by a random factor in [0.5, 1.5)."""

    def __init__(self, start_s: float, max_s: float) -> None:
        self.start_s = start_s
        self.max_s = max(max_s, start_s)
        self._current = start_s
        self.failures = 0

    def next_delay(self) -> float:
        """The wait before the next try; the one after it will be about twice as long."""
        delay = self._current * (0.5 + random.random())
        self._current = min(self._current * 2, self.max_s)
        self.failures += 1
        return min(delay, self.max_s)

    def reset(self) -> None:
        """A success: the next failure starts again from ``start_s``."""
        self._current = self.start_s
        self.failures = 0
