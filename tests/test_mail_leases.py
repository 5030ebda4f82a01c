"""Leases on mail and on learning (migration 0015) on a real libSQL file: one holder at a time, taken over only
once the lease ran out by the clock, given back when done. Two daemons on one database rely on these claims."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quinn.agent import learning
from quinn.mailbox.ledger import MailKey, MailLedger
from quinn.memory.db import Database

NOW = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
A, B = "host-a:ns:101:aaaaaa", "host-b:ns:202:bbbbbb"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database.open(str(tmp_path / "quinn.db"))
    try:
        yield database
    finally:
        database.close()


def test_one_holder_claims_a_mail_until_its_lease_runs_out(db: Database) -> None:
    ledger = MailLedger(db)
    key = MailKey("INBOX", 7, 1)
    ledger.receive(key)
    mine = ledger.claim(key, A, NOW, 15)
    assert mine is not None and mine.state == "received"
    assert ledger.lease_of(key) == (A, (NOW + timedelta(seconds=15)).isoformat())
    assert ledger.claim(key, B, NOW + timedelta(seconds=14), 15) is None  # A's still
    renewed = ledger.claim(key, A, NOW + timedelta(seconds=10), 15)  # A renews its own
    assert renewed is not None
    assert ledger.claim(key, B, NOW + timedelta(seconds=24), 15) is None  # the renewal counts
    # A was killed: nobody renews; once the lease ran out, B takes the mail over, and sees where A left it.
    ledger.set(key, "handling", "authenticated", message_id="<m@x>")
    taken = ledger.claim(key, B, NOW + timedelta(seconds=26), 15)
    assert taken is not None and (taken.state, taken.message_id) == ("handling", "<m@x>")
    assert ledger.claim(key, A, NOW + timedelta(seconds=27), 15) is None  # A, back, does not get it back


def test_a_released_lease_is_free_and_only_its_holder_releases_it(db: Database) -> None:
    ledger = MailLedger(db)
    key, other = MailKey("INBOX", 7, 1), MailKey("INBOX", 7, 2)
    ledger.receive(key)
    ledger.receive(other)
    assert ledger.claim(key, A, NOW, 900) is not None
    assert ledger.claim(other, B, NOW, 900) is not None  # a lease is per mail
    ledger.release_lease(key, B)  # not B's: nothing happens
    assert ledger.lease_of(key)[0] == A
    ledger.release_lease(key, A)
    assert ledger.lease_of(key) == (None, None)
    assert ledger.claim(key, B, NOW + timedelta(seconds=1), 900) is not None  # at once, no waiting for expiry
    assert ledger.claim(MailKey("INBOX", 7, 3), A, NOW, 900) is None  # a mail never received has no row


def test_one_daemon_learns_from_a_mail_and_a_dead_ones_try_is_taken_over(db: Database) -> None:
    learning.put(db, "<m@x>", "alice@x", b"Subject: hi\r\n\r\nhello\r\n", None)
    first = learning.begin(db, "<m@x>", A, NOW, 15)
    assert first is not None and not first.interrupted
    assert learning.begin(db, "<m@x>", B, NOW + timedelta(seconds=5), 15) is None  # A is learning from it
    again = learning.begin(db, "<m@x>", B, NOW + timedelta(seconds=16), 15)  # A's lease ran out: A died
    assert again is not None and again.interrupted and again.user_id == "alice@x"
    learning.done(db, "<m@x>")
    assert learning.begin(db, "<m@x>", A, NOW + timedelta(seconds=40), 15) is None  # learnt: off the queue


def test_a_lease_of_a_holder_known_dead_is_taken_at_once(db: Database) -> None:
    ledger = MailLedger(db)
    key = MailKey("INBOX", 7, 1)
    ledger.receive(key)
    assert ledger.claim(key, A, NOW, 900) is not None
    assert ledger.claim(key, B, NOW, 900, dead="someone-else") is None  # only the named dead holder's
    assert ledger.claim(key, B, NOW, 900, dead=A) is not None  # A's process is gone: no waiting 900 s
    learning.put(db, "<m@x>", "alice@x", b"Subject: hi\r\n\r\nhello\r\n", None)
    assert learning.begin(db, "<m@x>", A, NOW, 900) is not None
    assert learning.holder_of(db, "<m@x>") == A
    assert learning.begin(db, "<m@x>", B, NOW, 900) is None
    taken = learning.begin(db, "<m@x>", B, NOW, 900, dead=A)
    assert taken is not None and taken.interrupted


def test_settling_leaves_a_mail_another_daemon_is_filing(db: Database) -> None:
    """B finished a mail that arrived after A listed the folder and is moving it: not in A's list, yet still in
    the folder. A must not mark it filed; once B's lease ran out (B died before filing it), A may."""
    ledger = MailLedger(db)
    key = MailKey("INBOX", 7, 5)
    ledger.receive(key)
    assert ledger.claim(key, B, NOW, 15) is not None
    ledger.set(key, "replied", "ok")
    assert ledger.settle_moved("INBOX", 7, [1, 2], holder=A, now=NOW + timedelta(seconds=1)) == 0
    assert ledger.settle_moved("INBOX", 7, [1, 2], holder=B, now=NOW + timedelta(seconds=1)) == 1  # B's own
    other = MailKey("INBOX", 7, 6)
    ledger.receive(other)
    assert ledger.claim(other, B, NOW, 15) is not None
    ledger.set(other, "replied", "ok")
    assert ledger.settle_moved("INBOX", 7, [1, 2], holder=A, now=NOW + timedelta(seconds=16)) == 1  # ran out
