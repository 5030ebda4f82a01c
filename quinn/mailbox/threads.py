"""Sessions: threads of mail between one user and Quinn, joined on the id graph, stored as the conversation.

A message joins the session of any id it references (Message-ID, In-Reply-To, References, our own reply
ids). A message that links two sessions merges them into the older one. Only mail without usable ids falls
back to the subject: same normalised subject, same correspondent, within a window (FACTS.md: subject
threading merged an unrelated "Re: Q3 report" in Dovecot's THREAD=REFERENCES).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from quinn.clock import iso, utcnow
from quinn.db import Database, Transaction
from quinn.mailbox.message import InboundEmail
from quinn.mailbox.policy import normalise_subject


@dataclass(frozen=True)
class StoredMessage:
    """One message of a session, as the agent sees the thread."""

    direction: str
    message_id: str
    from_addr: str
    subject: str
    sent_at: str
    body: str
    to_addrs: tuple[str, ...] = ()  # To and Cc of the message (for ours: everyone it went to)

    @property
    def participants(self) -> frozenset[str]:
        """Everyone who saw this message: its sender and its recipients."""
        return frozenset({self.from_addr, *self.to_addrs})


@dataclass(frozen=True)
class QuietSession:
    """A session due for closing, and the last-message time it was picked with."""

    id: str
    last_message_at: str


@dataclass(frozen=True)
class Unsummarized:
    """A session's rolling summary so far and the messages after it (``summarized_upto``, a message id)."""

    user_id: str
    subject: str
    summary: str | None
    summarized_upto: int
    messages: list[tuple[int, str, str, str]]  # (id, from_addr, sent_at, body), oldest first


#: Ids asked about per ``IN (...)`` list: far below SQLite's limit on parameters per statement.
IN_CHUNK = 500


def thread_key(email: InboundEmail) -> str:
    """The root Message-ID of the mail's thread: the first References id (RFC 5322 §3.6.4: a References field
    keeps the thread's first message first, also when trimmed), else In-Reply-To, else the mail's own id.
    Pure and known for every mail, so the per-thread rate cap also covers mail handled without memory."""
    if email.references:
        return email.references[0]
    return email.in_reply_to or email.message_id


class Sessions:
    """Assigns mail to sessions and keeps the conversation store."""

    def __init__(self, db: Database, subject_window_days: float = 14.0) -> None:
        self.db = db
        self.subject_window = timedelta(days=subject_window_days)

    def assign(self, email: InboundEmail, user_id: str, now: datetime | None = None, *, by_subject: bool = True) -> str:
        """The session this mail belongs to (created or merged as needed); records its ids. Idempotent.

        ``by_subject`` allows the subject fallback (mail without thread ids); it is for authenticated senders
        only, since a subject is all a forger needs to know to join someone's thread."""
        now = now or utcnow()
        with self.db.transaction() as tx:
            known = self._sessions_of(tx, (email.message_id, *email.thread_ids))
            # Only sessions of this user: a reference to someone else's thread must not leak it.
            owned = [s for s in known if self._owner(tx, s) == user_id]
            key = normalise_subject(email.subject)
            if owned:
                session_id = owned[0]
                for other in owned[1:]:
                    self._merge(tx, other, into=session_id)
            elif not email.thread_ids and key and by_subject:
                session_id = self._by_subject(tx, user_id, key, now) or self._create(tx, email, user_id, key, now)
            else:
                session_id = self._create(tx, email, user_id, key, now)
            tx.execute(
                "INSERT OR IGNORE INTO session_ids (message_id, session_id) VALUES (?, ?)",
                (email.message_id, session_id),
            )
            # New mail reopens a session the scheduler closed: it is reviewed again when it goes quiet.
            tx.execute(
                "UPDATE sessions SET last_message_at = ?, status = CASE status WHEN 'closed' THEN 'open'"
                " ELSE status END WHERE id = ?",
                (iso(now), session_id),
            )
        return session_id

    def _sessions_of(self, tx: Transaction, ids: tuple[str, ...]) -> list[str]:
        """The sessions any of ``ids`` joined, oldest first; asked ``IN_CHUNK`` ids at a time (SQLite refuses more
        than 32,766 parameters in one statement, and a mail's ids are the sender's to choose: issue 30)."""
        wanted = tuple(dict.fromkeys(i for i in ids if i))
        found: dict[str, str] = {}
        for start in range(0, len(wanted), IN_CHUNK):
            chunk = wanted[start : start + IN_CHUNK]
            rows = tx.query(
                "SELECT DISTINCT s.id, s.created_at FROM session_ids x JOIN sessions s ON s.id = x.session_id"
                f" WHERE x.message_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            found.update((str(r[0]), str(r[1])) for r in rows)
        return sorted(found, key=lambda session: (found[session], session))

    @staticmethod
    def _owner(tx: Transaction, session_id: str) -> str | None:
        rows = tx.query("SELECT user_id FROM sessions WHERE id = ?", (session_id,))
        return rows[0][0] if rows else None

    def _by_subject(self, tx: Transaction, user_id: str, key: str, now: datetime) -> str | None:
        rows = tx.query(
            "SELECT id FROM sessions WHERE user_id = ? AND subject_key = ? AND merged_into IS NULL"
            " AND last_message_at >= ? ORDER BY last_message_at DESC LIMIT 1",
            (user_id, key, iso(now - self.subject_window)),
        )
        return rows[0][0] if rows else None

    @staticmethod
    def _create(tx: Transaction, email: InboundEmail, user_id: str, key: str, now: datetime) -> str:
        session_id = "s_" + hashlib.sha256(f"{user_id}\0{email.message_id}".encode()).hexdigest()[:16]
        tx.execute(
            "INSERT OR IGNORE INTO sessions (id, user_id, subject, subject_key, created_at, last_message_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, user_id, email.subject, key, iso(now), iso(now)),
        )
        return session_id

    @staticmethod
    def _merge(tx: Transaction, source: str, *, into: str) -> None:
        tx.execute("UPDATE session_ids SET session_id = ? WHERE session_id = ?", (into, source))
        tx.execute("UPDATE messages SET session_id = ? WHERE session_id = ?", (into, source))
        tx.execute("UPDATE sessions SET merged_into = ?, status = 'merged' WHERE id = ?", (into, source))

    def link(self, session_id: str, message_id: str) -> None:
        """Record one of our own Message-IDs (a reply) as part of the session."""
        self.db.execute(
            "INSERT OR IGNORE INTO session_ids (message_id, session_id) VALUES (?, ?)", (message_id, session_id)
        )

    def store_inbound(self, session_id: str, user_id: str, email: InboundEmail) -> None:
        """Keep the inbound message in the conversation store (idempotent on Message-ID)."""
        sent_at = iso(email.date) or iso(utcnow())
        self.db.execute(
            "INSERT OR IGNORE INTO messages (session_id, user_id, direction, message_id, in_reply_to, subject,"
            " from_addr, to_addrs, sent_at, body, full_text, created_at)"
            " VALUES (?, ?, 'in', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                session_id, user_id, email.message_id, email.in_reply_to, email.subject, email.sender or "",
                json.dumps([a.address for a in (*email.to, *email.cc)]), sent_at, email.text, email.full_text,
                iso(utcnow()),
            ),
        )  # fmt: skip

    def subjects(self, user_id: str, message_ids: Sequence[str]) -> dict[str, str]:
        """The subjects of the user's inbound mails among ``message_ids`` (the console names a reply by the mail
        it answers, not by its Message-ID)."""
        wanted = sorted(set(message_ids))[:500]
        if not wanted:
            return {}
        rows = self.db.query(
            f"SELECT message_id, subject FROM messages WHERE user_id = ? AND direction = 'in'"
            f" AND message_id IN ({','.join('?' * len(wanted))})",
            (user_id, *wanted),
        )
        return {row[0]: row[1] or "" for row in rows}

    def withdraw(self, session_id: str, message_id: str) -> None:
        """Take an inbound message back out (``quinn ask`` when no reply came): the message, its passages (a
        trigger), its id, and the session when nothing else is left in it."""
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM messages WHERE session_id = ? AND message_id = ? AND direction = 'in'",
                       (session_id, message_id))  # fmt: skip
            tx.execute("DELETE FROM session_ids WHERE message_id = ?", (message_id,))
            if not tx.query("SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (session_id,)):
                tx.execute("DELETE FROM session_ids WHERE session_id = ?", (session_id,))
                tx.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    def store_outbound(
        self, session_id: str, user_id: str, message_id: str, in_reply_to: str, subject: str, from_addr: str,
        to_addrs: list[str], body: str, *, sent_at: datetime | None = None,
    ) -> None:  # fmt: skip
        """Keep our reply in the conversation store (idempotent on Message-ID); ``sent_at``: an imported sent
        mail's own date (default now)."""
        now = iso(utcnow())
        self.db.execute(
            "INSERT OR IGNORE INTO messages (session_id, user_id, direction, message_id, in_reply_to, subject,"
            " from_addr, to_addrs, sent_at, body, full_text, created_at)"
            " VALUES (?, ?, 'out', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, user_id, message_id, in_reply_to, subject, from_addr, json.dumps(to_addrs),
             iso(sent_at) or now, body, body, now),
        )  # fmt: skip

    def thread(self, session_id: str, limit: int = 20) -> list[StoredMessage]:
        """The session's last ``limit`` messages, oldest first."""
        rows = self.db.query(
            "SELECT direction, message_id, from_addr, subject, sent_at, body, to_addrs FROM messages"
            " WHERE session_id = ? ORDER BY sent_at DESC, id DESC LIMIT ?",
            (session_id, limit),
        )
        return [_stored(row) for row in reversed(rows)]

    def summary(self, session_id: str) -> str | None:
        """The rolling summary of the session's older messages, if one was written."""
        return self.db.query_value("SELECT summary FROM sessions WHERE id = ?", (session_id,))

    def summaries_of(self, user_id: str) -> list[dict[str, str]]:
        """The user's thread summaries, newest first: what the export and the person page show (issue 35)."""
        rows = self.db.query("SELECT subject, summary, last_message_at FROM sessions WHERE user_id = ? AND summary"
                             " IS NOT NULL ORDER BY last_message_at DESC", (user_id,))  # fmt: skip
        return [{"subject": r[0] or "", "summary": r[1], "date": r[2]} for r in rows]

    def rewrite_summaries(self, user_id: str, rewrite: Callable[[str], str | None]) -> int:
        """A forget's part of the threads (issue 35): each of the user's rolling summaries and subjects
        ``rewrite`` changes (None: left alone) is written without the forgotten fact; the subject's key follows
        it (a later "Re:" of the old subject then threads by its ids only). The subject heads each summary in
        "what do you know about me?" and the export. Returns how many threads changed."""
        changed = 0
        rows = self.db.query("SELECT id, subject, summary FROM sessions WHERE user_id = ?", (user_id,))
        with self.db.transaction() as tx:
            for session_id, subject, summary in rows:
                new_subject = rewrite(subject) if subject else None
                new_summary = rewrite(summary) if summary is not None else None
                if new_subject is not None:
                    tx.execute("UPDATE sessions SET subject = ?, subject_key = ? WHERE id = ?",
                               (new_subject, normalise_subject(new_subject), session_id))  # fmt: skip
                if new_summary is not None:
                    tx.execute("UPDATE sessions SET summary = ? WHERE id = ?", (new_summary, session_id))
                changed += new_subject is not None or new_summary is not None
        return changed

    def rewrite_messages(self, user_id: str, rewrite: Callable[[str], str | None]) -> int:
        """A forget's part of the stored conversation: each of the user's messages (theirs and Quinn's replies)
        whose subject, text or full text ``rewrite`` changes (None: left alone) is kept without the forgotten
        fact, its full-text index row with it. Without this, the next mail of the thread that told the fact showed
        it to the model again in the thread's earlier messages. Returns how many messages changed."""
        rows = self.db.query("SELECT id, subject, body, full_text FROM messages WHERE user_id = ?", (user_id,))
        changed = 0
        with self.db.transaction() as tx:
            for row_id, subject, body, full_text in rows:
                new = [rewrite(text or "") for text in (subject, body, full_text)]
                if all(text is None for text in new):
                    continue
                olds = (subject, body, full_text)
                subject2, body2, full2 = (old if text is None else text for old, text in zip(olds, new, strict=True))
                # messages_fts is an external-content index kept by insert and delete triggers only.
                tx.execute("INSERT INTO messages_fts (messages_fts, rowid, subject, body) VALUES ('delete', ?, ?, ?)",
                           (row_id, subject, body))  # fmt: skip
                tx.execute("UPDATE messages SET subject = ?, body = ?, full_text = ? WHERE id = ?",
                           (subject2, body2, full2, row_id))  # fmt: skip
                tx.execute("INSERT INTO messages_fts (rowid, subject, body) VALUES (?, ?, ?)",
                           (row_id, subject2, body2))  # fmt: skip
                changed += 1
        return changed

    def recent(self, session_id: str, limit: int = 20) -> list[StoredMessage]:
        """The last ``limit`` messages after the rolling summary (all of them while there is none), oldest first.

        Together with ``summary`` this is the thread as the reply context sees it: what the summarize job
        folded into the summary is not repeated verbatim.
        """
        rows = self.db.query(
            "SELECT direction, message_id, from_addr, subject, sent_at, body, to_addrs FROM messages"
            " WHERE session_id = ? AND id > (SELECT summarized_upto FROM sessions WHERE id = ?)"
            " ORDER BY sent_at DESC, id DESC LIMIT ?",
            (session_id, session_id, limit),
        )
        return [_stored(row) for row in reversed(rows)]

    def listing(self, user_id: str | None, limit: int) -> list[tuple[Any, ...]]:
        """Sessions, newest first, of one user or everyone, merged ones included: (id, user, subject, messages
        stored, last_message_at, status), the status of a merged one being ``merged into ID``."""
        return self.db.query(
            "SELECT s.id, s.user_id, s.subject, (SELECT count(*) FROM messages m WHERE m.session_id = s.id),"
            " s.last_message_at, CASE WHEN s.merged_into IS NULL THEN s.status ELSE 'merged into ' || s.merged_into"
            " END FROM sessions s WHERE (? IS NULL OR s.user_id = ?) ORDER BY s.last_message_at DESC LIMIT ?",
            (user_id, user_id, limit),
        )

    def header(self, session_id: str) -> tuple[Any, ...] | None:
        """The session's row as ``quinn sessions show`` prints it: (id, user, subject, created_at,
        last_message_at, status, merged_into, summary); None when there is no such session."""
        return self.db.query_one(
            "SELECT id, user_id, subject, created_at, last_message_at, status, merged_into, summary FROM sessions"
            " WHERE id = ?",
            (session_id,),
        )

    def all_messages(self, session_id: str) -> list[tuple[Any, ...]]:
        """Every stored message of the session, oldest first: (direction, message_id, in_reply_to, from_addr,
        sent_at, subject, body)."""
        return self.db.query(
            "SELECT direction, message_id, in_reply_to, from_addr, sent_at, subject, body FROM messages"
            " WHERE session_id = ? ORDER BY sent_at, id",
            (session_id,),
        )

    def message_ids(self, session_id: str) -> list[str]:
        """The Message-IDs that join mail to the session (``session_ids``: theirs and our replies')."""
        return [r[0] for r in self.db.query("SELECT message_id FROM session_ids WHERE session_id = ?", (session_id,))]

    def placed(self, message_id: str) -> tuple[str, str, int] | None:
        """Where a stored inbound mail sits: its session (after any merge), its date and the length of its own
        text; None when it is not stored (`quinn import` batches learning by thread with it)."""
        row = self.db.query_one("SELECT session_id, sent_at, length(body) FROM messages WHERE message_id = ?"
                                " AND direction = 'in' ORDER BY id LIMIT 1", (message_id,))  # fmt: skip
        return None if row is None else (str(row[0]), str(row[1]), int(row[2] or 0))

    def user_of(self, session_id: str) -> str | None:
        """The user the session belongs to, or None when there is no such session."""
        return self.db.query_value("SELECT user_id FROM sessions WHERE id = ?", (session_id,))

    def quiet(self, before: datetime) -> list[QuietSession]:
        """Open sessions without mail since ``before``, oldest first (the session-close job's work)."""
        rows = self.db.query(
            "SELECT id, last_message_at FROM sessions WHERE status = 'open' AND merged_into IS NULL"
            " AND last_message_at <= ? ORDER BY last_message_at, id",
            (iso(before),),
        )
        return [QuietSession(sid, at) for sid, at in rows]

    def over_length(self, max_chars: int) -> list[str]:
        """Sessions whose messages after the rolling summary are longer than ``max_chars`` (each message counted
        40 characters more for its header): the summarize job's cheap test before its exact one."""
        rows = self.db.query(
            "SELECT s.id FROM sessions s JOIN messages m ON m.session_id = s.id AND m.id > s.summarized_upto"
            " WHERE s.merged_into IS NULL GROUP BY s.id HAVING sum(length(m.body)) + 40 * count(*) > ?"
            " ORDER BY s.id",
            (max_chars,),
        )
        return [r[0] for r in rows]

    def unsummarized(self, session_id: str) -> Unsummarized | None:
        """The session's rolling summary and its messages after ``summarized_upto``; None when there is no such
        session."""
        row = self.db.query_one(
            "SELECT user_id, subject, summary, summarized_upto FROM sessions WHERE id = ?", (session_id,)
        )
        if row is None:
            return None
        user_id, subject, summary, upto = row
        rows = self.db.query(
            "SELECT id, from_addr, sent_at, body FROM messages WHERE session_id = ? AND id > ? ORDER BY id",
            (session_id, int(upto)),
        )
        messages = [(int(i), sender, sent_at, body) for i, sender, sent_at, body in rows]
        return Unsummarized(user_id, subject, summary, int(upto), messages)

    def own_words(self, session_id: str, user_id: str) -> list[str]:
        """What ``user_id`` wrote in the session (their stored mails, summarized ones included), oldest first: what
        a review's memories must stand on (agent/grounding.py), never Quinn's replies or others on the thread."""
        rows = self.db.query(
            "SELECT body FROM messages WHERE session_id = ? AND direction = 'in' AND lower(from_addr) = lower(?)"
            " ORDER BY id",
            (session_id, user_id),
        )
        return [str(r[0]) for r in rows]

    def unanswered_and_older(self, session_id: str, user_id: str) -> bool:
        """Whether the session holds no reply of Quinn's and ``user_id`` has a later session: an imported thread of
        the person's history (issue 32), or mail Quinn never answered, that is not their latest conversation."""
        row = self.db.query_one(
            "SELECT NOT EXISTS (SELECT 1 FROM messages WHERE session_id = ? AND direction = 'out')"
            " AND EXISTS (SELECT 1 FROM sessions o, sessions s WHERE s.id = ? AND o.user_id = ? AND o.id != s.id"
            " AND o.merged_into IS NULL AND o.last_message_at > s.last_message_at)",
            (session_id, session_id, user_id),
        )
        return bool(row and row[0])

    def save_summary(self, session_id: str, summary: str, expected_upto: int, new_upto: int) -> bool:
        """Store the new rolling summary if nobody else moved the session on meanwhile; True when stored."""
        with self.db.transaction() as tx:
            tx.execute(
                "UPDATE sessions SET summary = ?, summarized_upto = ? WHERE id = ? AND summarized_upto = ?",
                (summary, new_upto, session_id, expected_upto),
            )
            rows = tx.query("SELECT summarized_upto, summary FROM sessions WHERE id = ?", (session_id,))
        return bool(rows) and int(rows[0][0]) == new_upto and rows[0][1] == summary


def _stored(row: tuple) -> StoredMessage:
    direction, message_id, from_addr, subject, sent_at, body, to_addrs = row
    try:
        recipients = tuple(str(a) for a in json.loads(to_addrs or "[]"))
    except ValueError:
        recipients = ()
    return StoredMessage(direction, message_id, from_addr, subject, sent_at, body, recipients)


def close_if_unchanged(tx: Transaction, session_id: str, picked_at: str) -> bool:
    """Mark the session closed if it is still open with the last-message time it was picked with; False, and
    nothing written, when mail arrived since (``Sessions.assign`` moved ``last_message_at``) or it is gone."""
    row = tx.query("SELECT last_message_at, status FROM sessions WHERE id = ?", (session_id,))
    if not row or row[0][0] != picked_at or row[0][1] != "open":
        return False
    tx.execute("UPDATE sessions SET status = 'closed' WHERE id = ?", (session_id,))
    return True


def expire_before(tx: Transaction, before: str) -> dict[str, int]:
    """Retention (``[retention] conversations_days``): stored mail text sent before ``before`` goes, and threads
    quiet since then lose their rolling summary; the sessions stay (ids and state), so a late reply still joins."""
    quiet = "last_message_at < ? AND coalesce(summary, '') != ''"
    summaries = int(tx.query(f"SELECT count(*) FROM sessions WHERE {quiet}", (before,))[0][0])
    tx.execute(f"UPDATE sessions SET summary = NULL WHERE {quiet}", (before,))
    return {"messages": tx.delete("messages", "sent_at < ?", (before,)), "session_summaries": summaries}


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The mailbox's conversations in a purge (``MemoryStore.purge``): the user's stored messages, sessions and the
    Message-IDs that joined mail to them."""
    return {
        "messages": tx.delete("messages", "user_id = ?", (user,)),
        "session_ids": tx.delete("session_ids", "session_id IN (SELECT id FROM sessions WHERE user_id = ?)", (user,)),
        "sessions": tx.delete("sessions", "user_id = ?", (user,)),
    }
