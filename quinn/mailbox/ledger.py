"""The mail ledger: each message's processing state, keyed by where it was seen (folder, UIDVALIDITY, UID).

States: received → handling → replied | drafted | ignored | rejected | quarantined, or deferred (retried at
``next_attempt_at``) and failed (needs the operator). Every change carries a reason, so ``quinn mail status``
can say what happened to any mail. ``superseded`` marks a row whose key died with a UIDVALIDITY change
(RFC 3501 §2.3.1.1), ``retried`` a failed mail the operator moved back into the watched folder (it comes back
under a new UID, RFC 3501 §2.3.1.1 again): in both cases the same mail is carried on under its new key, found by
its Message-ID.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from quinn.clock import iso, utcnow
from quinn.db import Database, Transaction
from quinn.mailbox.policy import UNVERIFIED_PREFIX

#: ``imported``: taken in by `quinn import` (stored, threaded, queued for learning) and never answered.
FINAL_STATES = frozenset({"replied", "drafted", "ignored", "rejected", "quarantined", "failed", "imported"})
REPLIED_STATES = ("replied", "drafted")
#: Rows whose mail lives on under another key: the next copy seen with the same Message-ID carries it on.
HANDED_ON_STATES = ("superseded", "retried")
#: Tries at reading a mail that never ended (the daemon killed meanwhile, or the parse at its deadline) before
#: the mail is quarantined as poison instead of read again (issue 30): one kill may be bad luck, three are the mail.
POISON_STRIKES = 3
_FINAL_SQL = ", ".join(f"'{state}'" for state in sorted(FINAL_STATES))  # constants, never user text


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
    strikes: int = 0  # tries at reading it that never ended (``MailLedger.strike``)

    @property
    def final(self) -> bool:
        """Nothing more will be done with this mail except filing it away."""
        return self.state in FINAL_STATES

    def due(self, now: datetime) -> bool:
        """False for a deferred mail whose retry time has not come yet."""
        waiting = self.state == "deferred" and self.next_attempt_at
        return not (waiting and str(self.next_attempt_at) > (iso(now) or ""))


@dataclass(frozen=True)
class MailEntry:
    """One ledger row as the console lists it, with the subject of the stored mail when there is one."""

    record: MailRecord
    subject: str
    received_at: str
    updated_at: str


class MailLedger:
    """Reads and writes ``mail_state``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, key: MailKey) -> MailRecord | None:
        """The record for this key, or None when the mail was never seen."""
        row = self.db.query_one(
            "SELECT message_id, state, reason, user_id, attempts, next_attempt_at, moved, strikes FROM mail_state"
            " WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (key.folder, key.uidvalidity, key.uid),
        )
        if row is None:
            return None
        message_id, state, reason, user_id, attempts, next_at, moved, strikes = row
        return MailRecord(key, message_id, state, reason, user_id, int(attempts), next_at, bool(moved), int(strikes))

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

    def claim(self, key: MailKey, holder: str, now: datetime, lease_s: float, *,
              dead: str | None = None) -> MailRecord | None:  # fmt: skip
        """Take (or renew) the lease on a mail for ``holder`` until ``now + lease_s``: it is free, expired,
        already ours, or held by ``dead`` (a holder known to be gone). Returns the record as it is once claimed
        (another daemon may have moved it meanwhile), or None when another daemon holds it. The claim is read
        back in its transaction: a driver's rowcount is not relied upon."""
        where = "folder = ? AND uidvalidity = ? AND uid = ?"
        ids = (key.folder, key.uidvalidity, key.uid)
        with self.db.transaction() as tx:
            tx.execute(
                f"UPDATE mail_state SET lease_holder = ?, lease_until = ? WHERE {where}"
                " AND (lease_holder IS NULL OR lease_holder IN (?, ?) OR lease_until IS NULL OR lease_until <= ?)",
                (holder, iso(now + timedelta(seconds=lease_s)), *ids, holder, dead or holder, iso(now)),
            )
            rows = tx.query(f"SELECT lease_holder FROM mail_state WHERE {where}", ids)
        if not rows or rows[0][0] != holder:
            return None
        return self.get(key)

    def release_lease(self, key: MailKey, holder: str) -> None:
        """Give the lease on a mail back (only if ``holder`` still has it): any daemon may take it up now."""
        self.db.execute(
            "UPDATE mail_state SET lease_holder = NULL, lease_until = NULL"
            " WHERE folder = ? AND uidvalidity = ? AND uid = ? AND lease_holder = ?",
            (key.folder, key.uidvalidity, key.uid, holder),
        )

    def strike(self, key: MailKey) -> int:
        """A try at reading the mail begins: counted as a strike until ``clear_strikes`` says it ended, so a try
        the daemon never came back from (killed, frozen) stays counted. Returns the strikes now."""
        self.db.execute(
            "UPDATE mail_state SET strikes = strikes + 1 WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (key.folder, key.uidvalidity, key.uid),
        )
        record = self.get(key)
        return record.strikes if record else 0

    def clear_strikes(self, key: MailKey) -> None:
        """The try at reading the mail ended (whatever its outcome): the mail is not poison."""
        self.db.execute(
            "UPDATE mail_state SET strikes = 0 WHERE folder = ? AND uidvalidity = ? AND uid = ? AND strikes != 0",
            (key.folder, key.uidvalidity, key.uid),
        )

    def lease_of(self, key: MailKey) -> tuple[str | None, str | None]:
        """Who holds the lease on a mail and until when (both None when nobody does)."""
        row = self.db.query_one(
            "SELECT lease_holder, lease_until FROM mail_state WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (key.folder, key.uidvalidity, key.uid),
        )
        return (row[0], row[1]) if row else (None, None)

    def set(
        self, key: MailKey, state: str, reason: str = "", *, message_id: str | None = None,
        user_id: str | None = None, session_id: str | None = None, thread_key: str | None = None,
        sender_key: str | None = None,
    ) -> None:  # fmt: skip
        """Move the mail to ``state`` with a reason; ids are recorded when given. ``sender_key`` is the rate
        caps' bucket (the user, or ``unverified:<address>``); it defaults to ``user_id``."""
        now = iso(utcnow())
        self.db.execute(
            "UPDATE mail_state SET state = ?, reason = ?, updated_at = ?, message_id = coalesce(?, message_id),"
            " user_id = coalesce(?, user_id), session_id = coalesce(?, session_id),"
            " thread_key = coalesce(?, thread_key), sender_key = coalesce(?, sender_key),"
            " replied_at = CASE WHEN ? THEN ? ELSE replied_at END WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (state, reason, now, message_id, user_id, session_id, thread_key, sender_key or user_id,
             state in REPLIED_STATES, now, key.folder, key.uidvalidity, key.uid),
        )  # fmt: skip

    def defer(self, key: MailKey, reason: str, until: datetime, *, count_attempt: bool = True) -> int:
        """Keep the mail for a later attempt at ``until``; returns the number of failed attempts so far.

        A rate cap defers without counting an attempt: waiting for the cap is not a failure.
        """
        self.db.execute(
            "UPDATE mail_state SET state = 'deferred', reason = ?, attempts = attempts + ?, next_attempt_at = ?,"
            " updated_at = ? WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (reason, int(count_attempt), iso(until), iso(utcnow()), key.folder, key.uidvalidity, key.uid),
        )
        record = self.get(key)
        return record.attempts if record else 0

    def retry(self, key: MailKey, reason: str) -> None:
        """The operator sends a failed mail round again: ``retried``, with a fresh count of attempts."""
        self.db.execute(
            "UPDATE mail_state SET state = 'retried', reason = ?, attempts = 0, next_attempt_at = NULL,"
            " updated_at = ? WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (reason, iso(utcnow()), key.folder, key.uidvalidity, key.uid),
        )

    def unlink(self, message_id: str) -> None:
        """Forget who sent ``message_id`` and the id itself (after a purge); the rows keep their states."""
        self.db.execute(
            "UPDATE mail_state SET message_id = '', user_id = NULL, session_id = NULL, thread_key = NULL,"
            " sender_key = NULL WHERE message_id = ?",
            (message_id,),
        )

    def due_now(self, message_id: str) -> None:
        """Deferred rows of this Message-ID may be taken up at the next pass."""
        self.db.execute(
            "UPDATE mail_state SET next_attempt_at = ? WHERE message_id = ? AND state = 'deferred'",
            (iso(utcnow()), message_id),
        )

    def release(self, reason_prefix: str) -> int:
        """Deferred rows whose reason starts with ``reason_prefix`` are due now; returns how many."""
        now = iso(utcnow())
        rows = self.db.query(
            "SELECT folder, uidvalidity, uid FROM mail_state WHERE state = 'deferred'"
            " AND substr(reason, 1, length(?)) = ?",
            (reason_prefix, reason_prefix),
        )
        for folder, uidvalidity, uid in rows:
            self.db.execute(
                "UPDATE mail_state SET next_attempt_at = ? WHERE folder = ? AND uidvalidity = ? AND uid = ?",
                (now, folder, uidvalidity, uid),
            )
        return len(rows)

    def next_due(self, folder: str, uidvalidity: int) -> datetime | None:
        """When the earliest deferred mail of this folder is due again, or None when none waits."""
        value = self.db.query_value(
            "SELECT min(next_attempt_at) FROM mail_state WHERE folder = ? AND uidvalidity = ? AND state = 'deferred'",
            (folder, uidvalidity),
        )
        return datetime.fromisoformat(value) if value else None

    def mark_moved(self, key: MailKey) -> None:
        """The mail has been filed away from the watched folder."""
        self.db.execute(
            "UPDATE mail_state SET moved = 1, updated_at = ? WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (iso(utcnow()), key.folder, key.uidvalidity, key.uid),
        )

    def settle_moved(self, folder: str, uidvalidity: int, present: Iterable[int], *, holder: str = "",
                     now: datetime | None = None, dead: Callable[[str], bool] = lambda _: False) -> int:  # fmt: skip
        """Mark filed the finished mails of ``folder`` that are no longer in it (``present``: every UID the folder
        holds now). A crash between the IMAP move and ``mark_moved`` leaves such a row; with several mails in
        flight, one mail's crash can catch another in that window. With ``now``, a row another daemon holds a
        live lease on is left to it (``holder``: this daemon; ``dead`` tells a holder known to be gone, whose
        lease does not count): a mail it finished after ``present`` was listed is not in the list, yet may still
        be in the folder. Returns how many rows were settled."""
        rows = self.db.query(
            "SELECT uid, lease_holder, lease_until FROM mail_state WHERE folder = ? AND uidvalidity = ? AND moved = 0"
            f" AND state IN ({_FINAL_SQL})",
            (folder, uidvalidity),
        )
        here, at = set(present), iso(now)

        def free(other: str | None, until: str | None) -> bool:
            return at is None or other is None or other == holder or until is None or until <= at or dead(other)

        gone = [int(uid) for uid, other, until in rows if int(uid) not in here and free(other, until)]
        for uid in gone:
            self.mark_moved(MailKey(folder, uidvalidity, uid))
        return len(gone)

    def elsewhere(self, message_id: str, key: MailKey) -> MailRecord | None:
        """Another row of the same Message-ID: a final one first (the mail was dealt with: a duplicate copy,
        or seen before a UIDVALIDITY change), then a superseded or retried one (to carry on), then one still in
        progress."""
        row = self.db.query_one(
            "SELECT folder, uidvalidity, uid FROM mail_state WHERE message_id = ?"
            " AND NOT (folder = ? AND uidvalidity = ? AND uid = ?)"
            f" ORDER BY CASE WHEN state IN ({_FINAL_SQL}) THEN 0 WHEN state IN ('superseded', 'retried') THEN 1"
            " ELSE 2 END,"
            " updated_at DESC LIMIT 1",
            (message_id, key.folder, key.uidvalidity, key.uid),
        )
        return self.get(MailKey(row[0], int(row[1]), int(row[2]))) if row else None

    def resync(self, folder: str, uidvalidity: int) -> int:
        """After a UIDVALIDITY change: rows of ``folder`` under another UIDVALIDITY that are not final can never
        be finished under their key; mark them superseded (their mail is carried on under its new key when it
        is seen again, by Message-ID). Returns how many there were."""
        reason = f"UIDVALIDITY of {folder} is now {uidvalidity}"
        now = iso(utcnow())
        rows = self.db.query(
            "SELECT uidvalidity, uid FROM mail_state WHERE folder = ? AND uidvalidity != ?"
            f" AND state NOT IN ({_FINAL_SQL}, 'superseded', 'retried')",
            (folder, uidvalidity),
        )
        for old_validity, uid in rows:
            self.db.execute(
                "UPDATE mail_state SET state = 'superseded', reason = ? || ' (was ' || state || ': ' || reason"
                " || ')', moved = 1, updated_at = ? WHERE folder = ? AND uidvalidity = ? AND uid = ?",
                (reason, now, folder, old_validity, uid),
            )
        return len(rows)

    def carry_over(self, old: MailRecord, key: MailKey) -> MailRecord:
        """Give the new row of a mail the attempts and retry time of its superseded (or retried) row."""
        self.db.execute(
            "UPDATE mail_state SET message_id = ?, attempts = ?, next_attempt_at = ?,"
            " state = CASE WHEN ? IS NOT NULL THEN 'deferred' ELSE state END,"
            " reason = CASE WHEN ? IS NOT NULL THEN ? ELSE reason END"
            " WHERE folder = ? AND uidvalidity = ? AND uid = ?",
            (old.message_id, old.attempts, old.next_attempt_at, old.next_attempt_at, old.next_attempt_at,
             f"carried over from {old.key.uidvalidity}/{old.key.uid}", key.folder, key.uidvalidity, key.uid),
        )  # fmt: skip
        self.db.execute(
            "UPDATE mail_state SET reason = reason || ', carried on as ' || ? WHERE folder = ? AND uidvalidity = ?"
            " AND uid = ?",
            (f"{key.uidvalidity}/{key.uid}", old.key.folder, old.key.uidvalidity, old.key.uid),
        )
        record = self.get(key)
        assert record is not None
        return record

    def replies_since(self, since: datetime, *, sender_key: str | None = None, thread_key: str | None = None) -> int:
        """Replies sent (or drafted) since ``since`` to this sender bucket or in this thread, for the rate caps."""
        column, value = ("sender_key", sender_key) if sender_key is not None else ("thread_key", thread_key)
        return int(
            self.db.query_value(
                f"SELECT count(*) FROM mail_state WHERE {column} = ? AND replied_at >= ?", (value, iso(since))
            )
            or 0
        )

    def nth_reply_since(self, since: datetime, n: int, *, sender_key: str | None = None,
                        thread_key: str | None = None) -> datetime | None:  # fmt: skip
        """The time of the ``n``-th reply (1 = oldest) since ``since``: when it leaves the window, a slot frees."""
        column, value = ("sender_key", sender_key) if sender_key is not None else ("thread_key", thread_key)
        moment = self.db.query_value(
            f"SELECT replied_at FROM mail_state WHERE {column} = ? AND replied_at >= ? ORDER BY replied_at"
            " LIMIT 1 OFFSET ?",
            (value, iso(since), max(n - 1, 0)),
        )
        return datetime.fromisoformat(moment) if moment else None

    def cap_reached(
        self, sender_key: str, thread_key: str, per_sender: int, per_thread: int, now: datetime | None = None
    ) -> tuple[str, datetime] | None:
        """``(reason, until)`` when this sender bucket or this thread has had its replies for the hour, else None.

        ``until`` is when the oldest counted reply leaves the one-hour window, so the mail is answered as soon
        as the cap allows: late, never dropped.
        """
        now = now or utcnow()
        since = now - timedelta(hours=1)
        for what, cap, ids in (("sender", per_sender, {"sender_key": sender_key}),
                               ("thread", per_thread, {"thread_key": thread_key})):  # fmt: skip
            count = self.replies_since(since, **ids)
            if count >= cap:
                oldest = self.nth_reply_since(since, count - cap + 1, **ids) or now
                until = max(oldest + timedelta(hours=1), now + timedelta(seconds=1))
                return f"rate cap: {count} replies to this {what} in the last hour (cap {cap})", until
        return None

    def message_ids(self, folder: str, state: str) -> list[str]:
        """The Message-IDs of the mails of ``folder`` in ``state`` (`quinn import`: what it imported from a
        source), in the order they were first seen."""
        rows = self.db.query("SELECT message_id FROM mail_state WHERE folder = ? AND state = ?"
                             " AND message_id IS NOT NULL ORDER BY received_at, rowid", (folder, state))  # fmt: skip
        return [row[0] for row in rows]

    def outbound_cap_reached(
        self, domains: Iterable[str], *, per_domain: int, per_hour: int, unverified: bool, per_unverified: int,
        now: datetime | None = None,
    ) -> tuple[str, datetime] | None:  # fmt: skip
        """``(reason, until)`` when a reply now would pass an outbound cap, else None: the replies of the last hour
        touching one of ``domains`` (the sender's and the recipients', ``count_outbound``), all replies, and (for
        mail nobody vouched for, ``unverified``) all replies to unverified senders. ``until`` is when the oldest
        counted reply leaves the hour, as in ``cap_reached``: the mail waits, never dropped."""
        now = now or utcnow()
        since = iso(now - timedelta(hours=1))

        def until(moment: str | None) -> datetime:
            oldest = datetime.fromisoformat(moment) if moment else now
            return max(oldest + timedelta(hours=1), now + timedelta(seconds=1))

        for domain in sorted(set(domains)):
            count = int(
                self.db.query_value(
                    "SELECT count(*) FROM outbound_domains WHERE domain = ? AND sent_at >= ?", (domain, since)
                )
                or 0
            )
            if count >= per_domain:
                moment = self.db.query_value(
                    "SELECT sent_at FROM outbound_domains WHERE domain = ? AND sent_at >= ? ORDER BY sent_at"
                    " LIMIT 1 OFFSET ?", (domain, since, count - per_domain))  # fmt: skip
                return f"rate cap: {count} replies touching {domain} in the last hour (cap {per_domain})", until(moment)
        checks = [("", per_hour, "replies")]
        if unverified:
            checks.append(
                (
                    f"AND substr(sender_key, 1, {len(UNVERIFIED_PREFIX)}) = '{UNVERIFIED_PREFIX}'",
                    per_unverified,
                    "replies to unverified senders",
                )
            )  # fmt: skip (constants, no user text)
        for where, cap, what in checks:
            count = int(self.db.query_value(
                f"SELECT count(*) FROM mail_state WHERE replied_at >= ? {where}", (since,)) or 0)  # fmt: skip
            if count >= cap:
                moment = self.db.query_value(
                    f"SELECT replied_at FROM mail_state WHERE replied_at >= ? {where} ORDER BY replied_at"
                    " LIMIT 1 OFFSET ?", (since, max(count - cap, 0)))  # fmt: skip
                return f"rate cap: {count} {what} in the last hour (cap {cap})", until(moment)
        return None

    def count_outbound(self, domains: Iterable[str], at: datetime | None = None) -> None:
        """A reply went out (or was drafted) touching ``domains``: counted once per domain for the domain cap.
        Rows older than a day go at the same time (the cap looks back one hour)."""
        moment = at or utcnow()
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM outbound_domains WHERE sent_at < ?", (iso(moment - timedelta(days=1)),))
            for domain in sorted(set(domains)):
                tx.execute("INSERT INTO outbound_domains (domain, sent_at) VALUES (?, ?)", (domain, iso(moment)))

    def seen_in(self, folder: str) -> bool:
        """Whether any mail of ``folder`` is in the ledger (under any UIDVALIDITY): Quinn has read it before."""
        return self.db.query_one("SELECT 1 FROM mail_state WHERE folder = ? LIMIT 1", (folder,)) is not None

    def counts(self) -> dict[str, int]:
        """Mails per state."""
        return {state: int(n) for state, n in self.db.query("SELECT state, count(*) FROM mail_state GROUP BY 1")}

    def listing(self, *, state: str | None = None, user_id: str | None = None, message_id: str | None = None,
                limit: int = 100) -> list[MailEntry]:  # fmt: skip
        """The most recently changed mails, newest first, optionally of one state, one user or one Message-ID. The
        subject comes from the stored inbound message (none for mail Quinn did not keep: ignored, rejected, no
        memory)."""
        where, params = [], []
        if message_id:
            where.append("l.message_id = ?")
            params.append(message_id)
        if state:
            where.append("l.state = ?")
            params.append(state)
        if user_id:
            where.append("l.user_id = ?")
            params.append(user_id)
        rows = self.db.query(
            "SELECT l.folder, l.uidvalidity, l.uid, l.message_id, l.state, l.reason, l.user_id, l.attempts,"
            " l.next_attempt_at, l.moved, l.received_at, l.updated_at,"
            " (SELECT g.subject FROM messages g WHERE g.message_id = l.message_id AND l.message_id != ''"
            "  AND g.direction = 'in' LIMIT 1)"
            f" FROM mail_state l {'WHERE ' + ' AND '.join(where) if where else ''}"
            " ORDER BY l.updated_at DESC, l.rowid DESC LIMIT ?",
            [*params, int(limit)],
        )
        entries = []
        for folder, uidv, uid, mid, st, reason, user, attempts, next_at, moved, received, updated, subject in rows:
            record = MailRecord(MailKey(folder, int(uidv), int(uid)), mid, st, reason, user, int(attempts), next_at,
                                bool(moved))  # fmt: skip
            entries.append(MailEntry(record, subject or "", received, updated))
        return entries


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The ledger in a purge (``MemoryStore.purge``): it keeps no text, but its user column names the person and
    the Message-IDs of their mail (and the thread roots) are theirs too, as is unverified mail from their address:
    the rows are unlinked and their ids blanked. They stay, so the counts per state still add up; a copy of the
    same mail seen again would now be answered again."""
    count = int(tx.query("SELECT count(*) FROM mail_state WHERE user_id = ?", (user,))[0][0])
    tx.execute("UPDATE mail_state SET user_id = NULL, session_id = NULL, message_id = '', thread_key = NULL,"
               " sender_key = NULL WHERE user_id = ? OR sender_key = ?", (user, UNVERIFIED_PREFIX + user))  # fmt: skip
    return {"mail_state": count}
