"""The backlog: mail that was in the watched folder before Quinn first watched it (issue 19).

A first start must not answer a whole existing inbox. The first time Quinn watches a folder it records the
folder's UIDNEXT (RFC 3501 §2.3.1.1: every later message gets a UID at least that high) in ``watched_folders``;
mail below it is the backlog, left in the folder untouched (neither read, answered, flagged nor moved) unless the
operator asks (``imap.backlog = "answer"`` or ``quinn run --backlog``: from then on it is ordinary mail).

A UIDVALIDITY change voids every UID. If no backlog was waiting, everything in the folder came after the first
watch and is taken as new (mail already answered is known by its Message-ID). If a backlog was waiting, the two
cannot be told apart without reading them, so the mark moves to the new UIDNEXT: nothing is answered that the
operator did not ask for, and the log says how to answer it.

This module owns ``watched_folders`` (migration 0009). Its methods run on the DB thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from quinn.clock import iso, utcnow
from quinn.db import Database
from quinn.mailbox.ledger import MailLedger

ANSWER_HINT = 'to answer them, run `quinn run --backlog` once or set imap.backlog = "answer"'


@dataclass(frozen=True)
class WatchMark:
    """From which UID on Quinn answers mail in a folder, and since when it watches it."""

    folder: str
    uidvalidity: int
    first_uid: int
    watched_at: str
    skipped: int  # mails below first_uid still in the folder at the last look

    def waiting(self, uids: list[int]) -> list[int]:
        """The UIDs of ``uids`` that belong to the backlog."""
        return [uid for uid in uids if uid < self.first_uid]


def first_uid(previous: WatchMark | None, seen_before: bool, uidnext: int, answer: bool) -> tuple[int, str]:
    """The first UID to answer in a folder Quinn (re)starts watching under a new UIDVALIDITY, and why (pure).

    ``seen_before``: the ledger already holds mail of this folder, i.e. a Quinn older than the backlog rule
    watched it, and answered everything in it.
    """
    if answer:
        return 1, "the backlog is answered, as asked"
    if previous is None and seen_before:
        return 1, "watched before the backlog rule: every mail in it is taken as new, as before"
    if previous is None:
        return uidnext, "first watch: mail already in the folder is the backlog"
    if previous.skipped == 0:
        return 1, "UIDVALIDITY changed and no backlog was waiting: every mail in it is taken as new"
    return uidnext, "UIDVALIDITY changed while a backlog was waiting: every mail in it now is taken as backlog"


class Watches:
    """Reads and writes ``watched_folders``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def get(self, folder: str) -> WatchMark | None:
        """The folder's mark, or None when Quinn never watched it."""
        row = self.db.query_one(
            "SELECT uidvalidity, first_uid, watched_at, skipped FROM watched_folders WHERE folder = ?", (folder,)
        )
        if row is None:
            return None
        uidvalidity, first, watched_at, skipped = row
        return WatchMark(folder, int(uidvalidity), int(first), str(watched_at), int(skipped))

    def watch(self, folder: str, uidvalidity: int, uidnext: int, answer: bool) -> tuple[WatchMark, str | None]:
        """The folder's mark under ``uidvalidity``, recorded now when there is none yet; returns it and, when it
        was just recorded, why its first UID is what it is."""
        previous = self.get(folder)
        if previous is not None and previous.uidvalidity == uidvalidity:
            if answer and previous.first_uid > 1:
                self.db.execute("UPDATE watched_folders SET first_uid = 1 WHERE folder = ?", (folder,))
                return self.get(folder) or previous, "the backlog is answered, as asked"
            return previous, None
        first, why = first_uid(previous, MailLedger(self.db).seen_in(folder), uidnext, answer)
        watched_at = previous.watched_at if previous is not None else iso(utcnow())
        self.db.execute(
            "INSERT INTO watched_folders (folder, uidvalidity, first_uid, watched_at, skipped) VALUES (?, ?, ?, ?, 0)"
            " ON CONFLICT (folder) DO UPDATE SET uidvalidity = excluded.uidvalidity,"
            " first_uid = excluded.first_uid, skipped = 0",
            (folder, uidvalidity, first, watched_at),
        )
        mark = self.get(folder)
        assert mark is not None
        return mark, why

    def count_skipped(self, folder: str, skipped: int) -> None:
        """Remember how many backlog mails were still in the folder at the last look."""
        self.db.execute("UPDATE watched_folders SET skipped = ? WHERE folder = ?", (skipped, folder))
