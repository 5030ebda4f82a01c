"""The outbox: a reply is written here before it is sent, so a crash never loses it nor sends it twice.

States: ``pending`` (written, not tried) → ``sending`` / ``drafting`` (a try is under way: the server may have
the message) → ``sent`` / ``drafted``, or ``failed`` (permanent refusal, with the reason). An item found in
``sending`` or ``drafting`` after a crash is checked against the mailbox before it is tried again.

Review (draft mode, migration 0020): a ``drafted`` item awaits review. An admin ``approved`` it (its text perhaps
replaced first) or ``discarded`` it (``review``); the daemon sends an approved one over SMTP (``sending`` →
``sent``, ``to_send_reviewed``) and removes the reviewed draft from the drafts folder (``drafts_to_remove``).
"""

from __future__ import annotations

import email
import email.policy
import json
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage

from quinn.clock import iso, utcnow
from quinn.db import Database, Transaction
from quinn.errors import MailParseError, QuinnError
from quinn.mailbox.message import InboundEmail
from quinn.mailbox.parse import parse_email
from quinn.mailbox.review import with_body


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
#: A reviewer's decisions on a draft awaiting review.
DECISIONS = frozenset({"approved", "discarded"})
_COLUMNS = "message_id, in_reply_to, user_id, session_id, recipients, raw, state, attempts, last_error"
#: Reviewed items the daemon still has to send: approved, or back to pending / interrupted after a try.
_REVIEWED_UNSENT = "reviewed_at IS NOT NULL AND state IN ('approved', 'pending', 'sending')"


@dataclass(frozen=True)
class Draft:
    """A reply in draft mode, as the reviewer sees it: awaiting review, or reviewed and not yet done with."""

    item: OutboxItem
    template: str
    drafted_at: str | None
    reviewed_by: str | None
    reviewed_at: str | None

    @property
    def awaiting(self) -> bool:
        """Nobody has decided on it yet."""
        return self.item.state == "drafted"

    @property
    def blanked(self) -> bool:
        """Retention blanked its text (``[retention] outbox_days``): it can be discarded, not approved."""
        return not self.item.raw


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
        blank_when_sent: bool = False,
    ) -> OutboxItem:  # fmt: skip
        """Record a reply as pending; when one with this id exists already, that one is returned unchanged.
        ``blank_when_sent``: its raw copy is not kept once it is sent (the reply to a forget names the fact)."""
        self.db.execute(
            "INSERT OR IGNORE INTO outbox (message_id, in_reply_to, user_id, session_id, recipients, raw, state,"
            " template, prompt_version, created_at, blank_when_sent) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
            (message_id, in_reply_to, user_id, session_id, json.dumps(recipients), raw, template, prompt_version,
             iso(utcnow()), int(blank_when_sent)),
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
        that certainly did not deliver (with the error). A reply to be blanked when sent loses its raw copy."""
        self.db.execute(
            "UPDATE outbox SET state = ?, last_error = ?,"
            " sent_at = CASE WHEN ? IN ('sent', 'drafted') THEN ? ELSE sent_at END,"
            " raw = CASE WHEN ? = 'sent' AND blank_when_sent = 1 THEN X'' ELSE raw END WHERE message_id = ?",
            (state, error, state, iso(utcnow()), state, message_id),
        )
        item = self.get(message_id)
        assert item is not None
        return item

    def pending(self, template: str | None = None) -> list[OutboxItem]:
        """Replies written but not known to be delivered (pending or in flight), oldest first; only those of
        ``template`` when given."""
        rows = self.db.query(
            "SELECT message_id FROM outbox WHERE state IN ('pending', 'sending', 'drafting')"
            " AND reviewed_at IS NULL AND (? IS NULL OR template = ?) ORDER BY created_at",
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

    def drafts(self, limit: int = 200) -> list[Draft]:
        """Drafts awaiting review, and reviewed ones the daemon has not sent yet or could not send (refused
        for good, with the reason), oldest first."""
        rows = self.db.query(
            "SELECT message_id, template, sent_at, reviewed_by, reviewed_at FROM outbox WHERE state = 'drafted'"
            f" OR ({_REVIEWED_UNSENT}) OR (reviewed_at IS NOT NULL AND state = 'failed')"
            " ORDER BY created_at, message_id LIMIT ?",
            (int(limit),),
        )
        drafts = []
        for mid, template, drafted_at, by, at in rows:
            if (item := self.get(mid)) is not None:
                drafts.append(Draft(item, template, drafted_at, by, at))
        return drafts

    def review(self, message_id: str, decision: str, reviewer: str, *, body: str | None = None) -> OutboxItem:
        """A reviewer's decision on a draft awaiting review: ``approved`` (with ``body``, the text it is sent
        with instead: ``review.with_body``) or ``discarded``. Refused with the reason (a ``QuinnError``) when the
        item is not a draft awaiting review (decided already, by someone else too), or when approving a draft
        whose text retention blanked."""
        if decision not in DECISIONS or (body is not None and decision != "approved"):
            raise ValueError(f"not a review decision: {decision}{' with a new text' if body is not None else ''}")
        with self.db.transaction() as tx:
            rows = tx.query("SELECT state, raw FROM outbox WHERE message_id = ?", (message_id,))
            if not rows:
                raise QuinnError(f"no reply {message_id} in the outbox", "copy an id from the list of drafts")
            state, raw = rows[0][0], bytes(rows[0][1])
            if state != "drafted":
                raise QuinnError(f"reply {message_id} is {state}, not a draft awaiting review",
                                 "only a draft nobody has decided on yet can be approved or discarded")  # fmt: skip
            if decision == "approved" and not raw:
                raise QuinnError(
                    f"the text of draft {message_id} was blanked by retention ([retention] outbox_days), so Quinn "
                    "has nothing to send", "send it from the drafts folder in your mail client, or discard it",
                )  # fmt: skip
            tx.execute(
                "UPDATE outbox SET state = ?, reviewed_by = ?, reviewed_at = ?, raw = ?, last_error = ''"
                " WHERE message_id = ? AND state = 'drafted'",
                (decision, reviewer, iso(utcnow()), raw if body is None else with_body(raw, body), message_id),
            )
        item = self.get(message_id)
        assert item is not None
        return item

    def reviewed_work(self) -> bool:
        """Whether a reviewed draft waits for the daemon: to be sent, or to leave the drafts folder."""
        return bool(self.db.query_value(
            f"SELECT EXISTS (SELECT 1 FROM outbox WHERE ({_REVIEWED_UNSENT}) OR (reviewed_at IS NOT NULL"
            " AND draft_removed_at IS NULL AND state IN ('sent', 'discarded')))"
        ))  # fmt: skip

    def to_send_reviewed(self) -> list[OutboxItem]:
        """Approved drafts not yet sent (a try that failed or was interrupted included), oldest decision first."""
        rows = self.db.query(f"SELECT message_id FROM outbox WHERE {_REVIEWED_UNSENT} ORDER BY reviewed_at")
        return [item for (mid,) in rows if (item := self.get(mid)) is not None]

    def drafts_to_remove(self) -> list[str]:
        """Message-IDs of reviewed drafts, sent or discarded, whose copy in the drafts folder is still to go."""
        rows = self.db.query(
            "SELECT message_id FROM outbox WHERE reviewed_at IS NOT NULL AND draft_removed_at IS NULL"
            " AND state IN ('sent', 'discarded') ORDER BY reviewed_at"
        )
        return [str(mid) for (mid,) in rows]

    def draft_removed(self, message_id: str) -> None:
        """The reviewed draft left the drafts folder (or was not there any more)."""
        self.db.execute("UPDATE outbox SET draft_removed_at = ? WHERE message_id = ?", (iso(utcnow()), message_id))

    def template_of(self, message_id: str) -> str | None:
        """The template a reply of ours was made with (``reply``, ``digest``, ``purge_done``, …), or None."""
        return self.db.query_value("SELECT template FROM outbox WHERE message_id = ?", (message_id,))

    def session_prompt_version(self, session_id: str) -> str:
        """The reply template version of the session's latest reply ("" when Quinn never answered in it)."""
        value = self.db.query_value(
            "SELECT prompt_version FROM outbox WHERE session_id = ? AND prompt_version != ''"
            " ORDER BY created_at DESC LIMIT 1",
            (session_id,),
        )
        return value or ""

    def counts(self) -> dict[str, int]:
        """Items per state."""
        return {state: int(n) for state, n in self.db.query("SELECT state, count(*) FROM outbox GROUP BY 1")}


def blank_mentions(db: Database, user_id: str, mentions: Callable[[str], bool]) -> int:
    """A forget (``forgetting.reach``): the raw copies of the user's replies already sent whose text ``mentions``
    the fact are blanked, as retention blanks them. A reply still to send or to review keeps its text (it is
    the reply the person or the reviewer gets). Returns how many."""
    with db.transaction() as tx:
        rows = tx.query("SELECT message_id, raw FROM outbox WHERE user_id = ? AND state IN ('sent', 'discarded')"
                        " AND length(raw) > 0", (user_id,))  # fmt: skip
        gone = [mid for mid, raw in rows if mentions(text_of(bytes(raw)))]
        for message_id in gone:
            tx.execute("UPDATE outbox SET raw = X'' WHERE message_id = ?", (message_id,))
    return len(gone)


def text_of(raw: bytes) -> str:
    """A mail's text parts, decoded: enough to tell whether it mentions something (not a parse for use)."""
    try:
        message = email.message_from_bytes(raw, policy=email.policy.default)
        parts = [p for p in message.walk() if p.get_content_maintype() == "text"]
        return "\n".join(str(p.get_content()) for p in parts if isinstance(p, EmailMessage))
    except (LookupError, ValueError, TypeError, AttributeError):  # an odd charset or header: the bytes will do
        return raw.decode("utf-8", "replace")


def carries_text_of(raw: bytes, copy: InboundEmail) -> bool:
    """Whether ``copy`` (a mail in our folder with a reply's Message-ID) holds the text of the reply we sent,
    ``raw``: its text, spaces aside, within the copy's (a server may add a banner or a disclaimer around it).
    Both are read by the same parser (ours: Quinn's own bytes, read here; the copy: as the pipeline read it)."""
    if not raw:
        return False
    try:
        ours = parse_email(raw).full_text
    except MailParseError:
        return False
    words = " ".join(ours.split())
    return bool(words) and words in " ".join(copy.full_text.split())


def carries_raw(raw: bytes, copy: bytes) -> bool:
    """Whether ``copy`` (a message's bytes in one of our folders, with a reply's Message-ID) holds the body of
    the reply we sent, ``raw``, byte for byte but for spaces and line ends (a server adds headers, may add a
    banner, and stores lines as it likes). Read without parsing: the restart check and the filing of copies run
    before the pipeline, on whatever a stranger put there. A server that re-encodes the body fails the check, and
    the reply is sent again (the same Message-ID, so a client can drop the duplicate): never lost."""
    ends = [at for at in (raw.find(b"\r\n\r\n"), raw.find(b"\n\n")) if at >= 0]
    words = b" ".join(raw[min(ends) :].split()) if ends else b""
    return bool(words) and words in b" ".join(copy.split())


def expire_before(tx: Transaction, before: str) -> dict[str, int]:
    """Retention (``[retention] outbox_days``): the raw copy of a reply sent, drafted or discarded (drafted
    before ``before``) is blanked; the row (state, template version) stays for the statistics. Pending, approved
    and failed replies are never touched: they still have to be sent or looked at. A draft awaiting review loses
    its text too: it can then be discarded, not approved (its copy in the drafts folder stays the reviewer's)."""
    went = "state IN ('sent', 'drafted', 'discarded') AND sent_at < ? AND length(raw) > 0"
    count = int(tx.query(f"SELECT count(*) FROM outbox WHERE {went}", (before,))[0][0])
    tx.execute(f"UPDATE outbox SET raw = X'' WHERE {went}", (before,))
    return {"outbox_raw": count}


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The user's replies, raw copies included, in a purge (``MemoryStore.purge``)."""
    return {"outbox": tx.delete("outbox", "user_id = ?", (user,))}
