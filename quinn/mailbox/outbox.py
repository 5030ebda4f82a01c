"""The outbox: a reply is written here before it is sent, so a crash never loses it nor sends it twice.

States: ``pending`` (written, not tried) → ``sending`` / ``drafting`` (a try is under way: the server may have
the message) → ``sent`` / ``drafted``, or ``failed`` (permanent refusal, with the reason). An item found in
``sending`` or ``drafting`` after a crash is checked against the mailbox before it is tried again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from quinn.clock import iso, utcnow
from quinn.db import Database, Transaction


@dataclass(frozen=True)
class OutboxItem:
    """One reply and its delivery state: pending, sending, drafting, sent, drafted or failed."""

    message_id: str
    in_reply_to: str
    user_id: str | None
    session_id: str | None
    recipients: list[str]
    raw: bytes
    state: str
    attempts: int
    last_error: str

    @property
    def in_flight(self) -> bool:
        """A try began and its outcome was never recorded: the message may have been delivered."""
        return self.state in IN_FLIGHT


IN_FLIGHT = frozenset({"sending", "drafting"})
_COLUMNS = "message_id, in_reply_to, user_id, session_id, recipients, raw, state, attempts, last_error"


class Outbox:
    """Durable send state, keyed by our deterministic Message-ID."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, message_id: str) -> OutboxItem | None:
        """The item for this Message-ID, or None."""
        row = self.db.query_one(f"SELECT {_COLUMNS} FROM outbox WHERE message_id = ?", (message_id,))
        if row is None:
            return None
        mid, parent, user, session, recipients, raw, state, attempts, error = row
        return OutboxItem(mid, parent, user, session, json.loads(recipients), bytes(raw), state, attempts, error)

    def put(
        self, message_id: str, in_reply_to: str, user_id: str | None, session_id: str | None,
        recipients: list[str], raw: bytes, *, template: str = "", prompt_version: str = "",
    ) -> OutboxItem:  # fmt: skip
        """Record a reply as pending; when one with this id exists already, that one is returned unchanged."""
        self.db.execute(
            "INSERT OR IGNORE INTO outbox (message_id, in_reply_to, user_id, session_id, recipients, raw, state,"
            " template, prompt_version, created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
            (message_id, in_reply_to, user_id, session_id, json.dumps(recipients), raw, template, prompt_version,
             iso(utcnow())),
        )  # fmt: skip
        item = self.get(message_id)
        assert item is not None
        return item

    def begin(self, message_id: str, state: str) -> OutboxItem:
        """Record that a try starts (``sending`` or ``drafting``), before the message leaves; counts the try."""
        if state not in IN_FLIGHT:
            raise ValueError(f"not an in-flight state: {state}")
        self.db.execute(
            "UPDATE outbox SET state = ?, attempts = attempts + 1 WHERE message_id = ?", (state, message_id)
        )
        item = self.get(message_id)
        assert item is not None
        return item

    def mark(self, message_id: str, state: str, error: str = "") -> OutboxItem:
        """Record an outcome: ``sent``, ``drafted``, ``failed`` (with the reason), or ``pending`` after a try
        that certainly did not deliver (with the error)."""
        self.db.execute(
            "UPDATE outbox SET state = ?, last_error = ?,"
            " sent_at = CASE WHEN ? IN ('sent', 'drafted') THEN ? ELSE sent_at END WHERE message_id = ?",
            (state, error, state, iso(utcnow()), message_id),
        )
        item = self.get(message_id)
        assert item is not None
        return item

    def pending(self, template: str | None = None) -> list[OutboxItem]:
        """Replies written but not known to be delivered (pending or in flight), oldest first; only those of
        ``template`` when given."""
        rows = self.db.query(
            "SELECT message_id FROM outbox WHERE state IN ('pending', 'sending', 'drafting')"
            " AND (? IS NULL OR template = ?) ORDER BY created_at",
            (template, template),
        )
        return [item for (mid,) in rows if (item := self.get(mid)) is not None]

    def forget_delivered(self, message_id: str) -> None:
        """Drop the text, recipients and parent id of a delivered item (a purge receipt: the last trace of a
        person). The row stays with its state and template, so the copy coming back is still known as ours."""
        self.db.execute(
            "UPDATE outbox SET in_reply_to = '', user_id = NULL, session_id = NULL, recipients = '[]', raw = ?"
            " WHERE message_id = ? AND state IN ('sent', 'drafted')",
            (b"", message_id),
        )

    def retry_failed(self, in_reply_to: str) -> None:
        """Put the reply to ``in_reply_to`` that was refused for good back to pending, so the delivery tries it
        again (``quinn mail retry``)."""
        self.db.execute(
            "UPDATE outbox SET state = 'pending', last_error = '' WHERE in_reply_to = ? AND state = 'failed'",
            (in_reply_to,),
        )

    def template_of(self, message_id: str) -> str | None:
        """The template a reply of ours was made with (``reply``, ``digest``, ``purge_done``, …), or None."""
        return self.db.query_value("SELECT template FROM outbox WHERE message_id = ?", (message_id,))

    def counts(self) -> dict[str, int]:
        """Items per state."""
        return {state: int(n) for state, n in self.db.query("SELECT state, count(*) FROM outbox GROUP BY 1")}


def expire_before(tx: Transaction, before: str) -> dict[str, int]:
    """Retention (``[retention] outbox_days``): the raw copy of a reply sent or drafted before ``before`` is
    blanked; the row (state, template version) stays for the statistics. Pending and failed replies are never
    touched: they still have to be sent or looked at."""
    went = "state IN ('sent', 'drafted') AND sent_at < ? AND length(raw) > 0"
    count = int(tx.query(f"SELECT count(*) FROM outbox WHERE {went}", (before,))[0][0])
    tx.execute(f"UPDATE outbox SET raw = X'' WHERE {went}", (before,))
    return {"outbox_raw": count}


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The user's replies, raw copies included, in a purge (``MemoryStore.purge``)."""
    return {"outbox": tx.delete("outbox", "user_id = ?", (user,))}
