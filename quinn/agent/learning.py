"""The learning queue (table ``learning_queue``, migration 0014): what an answered mail is to teach, kept until
it was learnt, so a crash between the reply and the extraction loses nothing and learning is never applied twice.

The mail engine (quinn/engine/mail.py) queues a mail before its ledger row turns final and learns from it right
after; each folder pass first learns from what a crash left queued. ``begin`` marks a try; a row already marked
was interrupted mid-try, and is learnt again only when no memory names the mail as its source (extraction stamps
``metadata.source.message_id``), since the store writes an extraction's memories in one go. With several daemons
``begin`` is a claim with a lease (migration 0015): exactly one daemon learns from a mail; a try of a daemon that
was killed is taken over once its lease ran out.

A try that failed for a reason that passes (the model gave no valid extraction twice, or could not be reached:
``RetryLater``, ``ConnectError``) leaves the row queued until ``retry_at`` (migration 0017, set by ``later``);
``blocked`` keeps the user's later mails behind it, so what a person wrote is learnt in the order they wrote it.

A forget asked while a mail of the person waits here (migration 0025) is noted on its row (``note_forget``): the
mail is learnt without the fact (``forgets_of``, read by ``Respond.learn``), not with it after the person was told
it was forgotten.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from quinn.clock import iso, utcnow
from quinn.db import Database, Transaction
from quinn.mailbox import outbox


@dataclass(frozen=True)
class Queued:
    """One mail waiting to be learnt from."""

    message_id: str
    user_id: str
    raw: bytes
    internal_date: datetime | None
    interrupted: bool  # a try had begun when the process stopped
    attempts: int = 1  # tries so far, this one included


def put(db: Database, message_id: str, user_id: str, raw: bytes, internal_date: datetime | None) -> None:
    """Queue an answered mail (a second put of the same mail changes nothing)."""
    db.execute("INSERT OR IGNORE INTO learning_queue (message_id, user_id, raw, internal_date, created_at)"
               " VALUES (?, ?, ?, ?, ?)", (message_id, user_id, raw, iso(internal_date), iso(utcnow())))  # fmt: skip


def begin(db: Database, message_id: str, holder: str, now: datetime, lease_s: float, *,
          dead: str | None = None) -> Queued | None:  # fmt: skip
    """Claim a try of ``message_id`` for ``holder`` (until ``now + lease_s``) and return it, or None when it is
    not queued (already learnt) or another daemon's try holds it. A try whose holder's lease ran out (the daemon
    was killed), or whose holder is ``dead`` (known to be gone), is taken over, as interrupted. The claim is read
    back in its transaction."""
    with db.transaction() as tx:
        rows = tx.query("SELECT user_id, raw, internal_date, state FROM learning_queue WHERE message_id = ?",
                        (message_id,))  # fmt: skip
        if not rows:
            return None
        tx.execute("UPDATE learning_queue SET state = 'learning', attempts = attempts + 1, holder = ?,"
                   " lease_until = ? WHERE message_id = ? AND (holder IS NULL OR holder IN (?, ?)"
                   " OR lease_until IS NULL OR lease_until <= ?) AND (retry_at IS NULL OR retry_at <= ?)",
                   (holder, iso(now + timedelta(seconds=lease_s)), message_id, holder, dead or holder,
                    iso(now), iso(now)))  # fmt: skip
        mine = tx.query("SELECT holder, attempts FROM learning_queue WHERE message_id = ?", (message_id,))
    if not mine or mine[0][0] != holder:
        return None
    user_id, raw, internal_date, state = rows[0]
    when = datetime.fromisoformat(internal_date) if internal_date else None
    return Queued(message_id, user_id, bytes(raw), when, state == "learning", int(mine[0][1]))


def later(db: Database, message_id: str, at: datetime, error: str) -> None:
    """The try failed for a reason that passes: queued again, not to be tried before ``at``."""
    db.execute("UPDATE learning_queue SET state = 'waiting', holder = NULL, lease_until = NULL, retry_at = ?,"
               " last_error = ? WHERE message_id = ?", (iso(at), error[:500], message_id))  # fmt: skip


def blocked(db: Database, user_id: str, message_id: str) -> bool:
    """True when an older mail of the user is still queued: this one waits until it is learnt (or given up)."""
    return db.query_one("SELECT 1 FROM learning_queue q, learning_queue me WHERE me.message_id = ?"
                        " AND q.user_id = ? AND q.message_id <> me.message_id AND (q.created_at < me.created_at"
                        " OR (q.created_at = me.created_at AND q.rowid < me.rowid)) LIMIT 1",
                        (message_id, user_id)) is not None  # fmt: skip


def user_of(db: Database, message_id: str) -> str | None:
    """Whose mail ``message_id`` is, while it is queued; None once learnt."""
    return db.query_value("SELECT user_id FROM learning_queue WHERE message_id = ?", (message_id,))


def holder_of(db: Database, message_id: str) -> str | None:
    """The daemon whose try at learning from ``message_id`` holds it (possibly expired), or None."""
    return db.query_value("SELECT holder FROM learning_queue WHERE message_id = ?", (message_id,))


def already_learnt(db: Database, user_id: str, message_id: str) -> bool:
    """True when a memory of the user names ``message_id`` as its source (the try before a crash applied it)."""
    return db.query_one("SELECT 1 FROM memories WHERE user_id = ? AND json_extract(metadata, '$.source.message_id')"
                        " = ? LIMIT 1", (user_id, message_id)) is not None  # fmt: skip


def done(db: Database, message_id: str) -> None:
    """The mail was learnt from (or taught nothing): off the queue."""
    db.execute("DELETE FROM learning_queue WHERE message_id = ?", (message_id,))


def waiting(db: Database) -> list[str]:
    """The Message-IDs still queued, oldest first (after a crash)."""
    return [row[0] for row in db.query("SELECT message_id FROM learning_queue ORDER BY created_at, rowid")]


def note_forget(db: Database, user_id: str, fact: dict[str, object], mentions: Callable[[str], bool]) -> int:
    """A forget of the user's (``fact``: ``Forgetting.record``) reaches their mail still to be learnt from: noted on
    each of its rows, read when it is learnt. Returns how many of those mails mention it (``mentions`` of their
    text parts), what the reply tells the person (runs on the DB thread)."""
    with db.transaction() as tx:
        rows = tx.query("SELECT message_id, forgets, raw FROM learning_queue WHERE user_id = ?", (user_id,))
        for message_id, forgets, _raw in rows:
            noted = [*json.loads(forgets or "[]"), fact]
            tx.execute("UPDATE learning_queue SET forgets = ? WHERE message_id = ?", (json.dumps(noted), message_id))
    return sum(1 for *_, raw in rows if mentions(outbox.text_of(bytes(raw or b""))))


def forgets_of(db: Database, message_id: str) -> list[dict[str, object]]:
    """What the person asked to forget since ``message_id`` was queued (none when it is not queued)."""
    return json.loads(db.query_value("SELECT forgets FROM learning_queue WHERE message_id = ?", (message_id,)) or "[]")


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The queue's part of a purge: the user's mail waiting to be learnt from."""
    return {"learning_queue": tx.delete("learning_queue", "user_id = ?", (user,))}
