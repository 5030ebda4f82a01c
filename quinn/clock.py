"""Time in one place: timezone-aware UTC, stored as ISO 8601 text."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time, timezone-aware UTC, to the second."""
    return datetime.now(UTC).replace(microsecond=0)


def iso(moment: datetime | str | None) -> str | None:
    """A datetime as ISO 8601 UTC text (the form stored in the DB); strings pass through normalised."""
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()
