"""The mail ledger: each message's processing state, keyed by where it was seen (folder, UIDVALIDITY, UID).

States: received → handling → replied | drafted | ignored | rejected | quarantined, or deferred (retried at
``next_attempt_at``) and failed (needs the operator). Every change carries a reason, so ``quinn mail status``
can say what happened to any mail.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from quinn.clock import iso, utcnow
from quinn.memory.db import Database

FINAL_STATES = frozenset({"replied", "drafted", "ignored", "rejected", "quarantined", "failed"})


@dataclass(frozen=True)
class MailKey:
    """Where a message was seen."""

    folder: str
    uidvalidity: int
    uid: int


@dataclass(frozen=True)
class MailRecord:
    """One ledger row."""

    key: MailKey
    message_id: str
    state: str
    reason: str
    user_id: str | None
    attempts: int
    next_attempt_at: str | None
    moved: bool

    @property
    def final(self) -> bool:
        """Nothing more will be done with this mail except filing it away."""
        return self.state in FINAL_STATES


class MailLedger:
    """Reads and writes ``mail_state``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, key: MailKey) -> MailRecord | None:
        """The record for this key, or None when the mail was never seen."""
        row = self.db.query_one(
            "SELECT message_id, state, reason, user_id, attempts, next_attempt_at, moved FROM mail_state"
            " WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (key.folder, key.uidvalidity, key.uid),
        )
        if row is None:
            return None
        message_id, state, reason, user_id, attempts, next_at, moved = row
        return MailRecord(key, message_id, state, reason, user_id, int(attempts), next_at, bool(moved))

    def receive(self, key: MailKey) -> MailRecord:
        """Record a newly seen mail as ``received`` (no-op when already known) and return its record."""
        now = iso(utcnow())
        self.db.execute(
            "INSERT OR IGNORE INTO mail_state (folder, uidvalidity, uid, state, received_at, updated_at)"
            " VALUES (?, ?, ?, 'received', ?, ?)",
            (key.folder, key.uidvalidity, key.uid, now, now),
        )
        record = self.get(key)
        assert record is not None
        return record

    def set(
        self, key: MailKey, state: str, reason: str = "", *, message_id: str | None = None,
        user_id: str | None = None, session_id: str | None = None,
    ) -> None:  # fmt: skip
        """Move the mail to ``state`` with a reason; ids are recorded when given."""
        self.db.execute(
            "UPDATE mail_state SET state = ?, reason = ?, updated_at = ?, message_id = coalesce(?, message_id),"
            " user_id = coalesce(?, user_id), session_id = coalesce(?, session_id)"
            " WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (state, reason, iso(utcnow()), message_id, user_id, session_id, key.folder, key.uidvalidity, key.uid),
        )

    def defer(self, key: MailKey, reason: str, delay: timedelta) -> int:
        """Keep the mail for a later attempt; returns the number of attempts so far."""
        self.db.execute(
            "UPDATE mail_state SET state = 'deferred', reason = ?, attempts = attempts + 1, next_attempt_at = ?,"
            " updated_at = ? WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (reason, iso(utcnow() + delay), iso(utcnow()), key.folder, key.uidvalidity, key.uid),
        )
        record = self.get(key)
        return record.attempts if record else 0

    def mark_moved(self, key: MailKey) -> None:
        """The mail has been filed away from the watched folder."""
        self.db.execute(
            "UPDATE mail_state SET moved = 1, updated_at = ? WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (iso(utcnow()), key.folder, key.uidvalidity, key.uid),
        )

    def done_elsewhere(self, message_id: str, key: MailKey) -> MailRecord | None:
        """A final record of the same Message-ID under another key (seen before a UIDVALIDITY change)."""
        row = self.db.query_one(
            "SELECT folder, uidvalidity, uid FROM mail_state WHERE message_id = ? AND state IN"
            f" ({','.join('?' * len(FINAL_STATES))}) AND NOT (folder = ? AND uidvalidity = ? AND uid = ?) LIMIT 1",
            (message_id, *sorted(FINAL_STATES), key.folder, key.uidvalidity, key.uid),
        )
        return self.get(MailKey(row[0], int(row[1]), int(row[2]))) if row else None

    def replies_since(self, user_id: str, since: datetime) -> int:
        """Replies sent (or drafted) to this user since ``since``, for the rate cap."""
        return int(
            self.db.query_value(
                "SELECT count(*) FROM mail_state WHERE user_id = ? AND state IN ('replied', 'drafted')"
                " AND updated_at >= ?",
                (user_id, iso(since)),
            )
            or 0
        )

    def counts(self) -> dict[str, int]:
        """Mails per state."""
        return {state: int(n) for state, n in self.db.query("SELECT state, count(*) FROM mail_state GROUP BY 1")}
