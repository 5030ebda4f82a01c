"""Time in one place: timezone-aware UTC, stored as ISO 8601 text.

Code that decides by the time (the scheduler and its jobs) takes a ``Clock`` object instead of calling
``utcnow()``, so a test or a replay can hand it a ``ManualClock`` and move time without sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import overload


def utcnow() -> datetime:
    """The current time, timezone-aware UTC, to the second."""
    return datetime.now(UTC).replace(microsecond=0)


@overload
def iso(moment: datetime | str) -> str: ...
@overload
def iso(moment: None) -> None: ...
@overload
def iso(moment: datetime | str | None) -> str | None: ...
def iso(moment: datetime | str | None) -> str | None:
    """A datetime as ISO 8601 UTC text (the form stored in the DB); strings pass through normalised."""
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


class Clock:
    """The system clock: ``now()`` is ``utcnow()``. Pass one explicitly; never keep one in a global."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC, to the second."""
        return utcnow()


class ManualClock(Clock):
    """A clock that moves only when told to: ``advance(hours=2)``, ``set(moment)``. Safe to read from threads."""

    def __init__(self, start: datetime | str) -> None:
        self._lock = threading.Lock()
        self._now = _utc(start)

    def now(self) -> datetime:
        """The time this clock was last set to."""
        with self._lock:
            return self._now

    def set(self, moment: datetime | str) -> datetime:
        """Jump to ``moment`` (backwards too: a test may need it); returns the new time."""
        with self._lock:
            self._now = _utc(moment)
            return self._now

    def advance(self, delta: timedelta | None = None, **units: float) -> datetime:
        """Move forward by ``delta`` or by ``timedelta(**units)``; returns the new time."""
        step = delta if delta is not None else timedelta(**units)
        if step < timedelta(0):
            raise ValueError(f"advance() goes forward only, got {step}; use set() to go back")
        with self._lock:
            self._now = self._now + step
            return self._now


def _utc(moment: datetime | str) -> datetime:
    text = iso(moment)
    assert text is not None
    return datetime.fromisoformat(text).replace(microsecond=0)
